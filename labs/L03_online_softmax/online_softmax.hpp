// Lab 03's interface (given, do not edit): an online softmax over logits that arrive in chunks.
//
// For logits x_j with values v_j, the softmax-weighted value is
//   y = Σ_j e^(x_j − m) v_j / Σ_j e^(x_j − m),   m = max_j x_j   (subtracting m: no overflow)
// The online form never holds all the logits: it keeps a running state (m, l, o) — the maximum so
// far, the sum of e^(x − m) so far, and the sum of e^(x − m)·v so far — and folds in one chunk at a
// time. This is exactly what every FlashAttention kernel does per query row, with a chunk being
// one block of keys and v a row of V.
#pragma once

#include <cmath>
#include <span>

namespace lab03 {

struct State {
  float m = -INFINITY;  // running maximum of the logits seen so far
  float l = 0.f;        // running Σ e^(x_j − m) over the logits seen so far
  float o = 0.f;        // running Σ e^(x_j − m)·v_j
};

// Folds one chunk of logits x (with values v, same length, at least one element) into `s`.
State update(State s, std::span<const float> x, std::span<const float> v);

// The result of a state: y = o / l, and the probability of a logit x: e^(x − m) / l.
inline float result(const State& s) { return s.o / s.l; }
inline float probability(const State& s, float x) { return std::exp(x - s.m) / s.l; }

}  // namespace lab03
