// Lab 03 — online softmax. REFERENCE SOLUTION: try the starter (../online_softmax.cpp) first.
#include <algorithm>

#include "labs/L03_online_softmax/online_softmax.hpp"

namespace lab03 {

State update(State s, std::span<const float> x, std::span<const float> v) {
  // The new reference point: the largest logit seen so far, this chunk included.
  float m_new = s.m;
  for (float xi : x) m_new = std::max(m_new, xi);

  // Everything accumulated so far was measured against the old maximum: e^(x − m_old) =
  // e^(x − m_new) · e^(m_old − m_new). Rescaling l AND o by that factor moves the history to the
  // new reference point. On the first chunk m_old = −inf and the factor is e^(−inf) = 0, which
  // is right: there is no history.
  const float rescale = std::exp(s.m - m_new);
  s.l *= rescale;
  s.o *= rescale;

  for (std::size_t j = 0; j < x.size(); ++j) {
    const float p = std::exp(x[j] - m_new);
    s.l += p;
    s.o += p * v[j];
  }
  s.m = m_new;
  return s;
}

}  // namespace lab03
