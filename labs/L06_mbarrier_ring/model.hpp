// Lab 06's protocol model (given, do not edit): the K/V ring of mbarrier_ring.cu played out on
// the CPU, with your ring.hpp's answers, under every interleaving of a small ring and under
// random schedules of the kernel's own. No GPU: a wrong answer is found here, with the shortest
// sequence of events that shows it, before the kernel ever runs.
//
// What is modelled (common/device/hopper/mbarrier.cuh, tma.cuh):
//   an mbarrier   a phase count (its parity is the phase bit), pending arrivals, pending bytes;
//                 a phase completes when both reach zero, then the arrivals reload;
//                 wait(P) can proceed once the current phase's parity is not P;
//   the producer  per block i: wait empty[s] for empty_parity(i); arrive.expect_tx(full[s],
//                 expect_bytes); issue the K copy; issue the V copy (s = stage(i));
//   the copy engine  each issued copy lands at any later moment (any order), writes its whole
//                 box into the stage and completes its box's bytes on full[s];
//   a consumer    per block i: wait full[s] for full_parity(i); read K; read V; arrive once on
//                 empty[s] at the point kRelease names (kernel: one consumer = one warp).
// What is detected: a wait that can never proceed (deadlock); a copy into a stage a consumer
// has not finished reading (overrun); a read of a stage whose bytes have not landed (early
// read); a copy landing after its phase already completed (the byte count); a second arrival on
// a phase (a barrier of count 1 armed twice); a stage or parity out of range.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "labs/L06_mbarrier_ring/lab06.hpp"

namespace lab06::model {

struct Protocol {
  std::function<int(int i, int stages)> stage;
  std::function<std::uint32_t(int i, int stages)> full_parity;
  std::function<std::uint32_t(int i, int stages)> empty_parity;
  std::function<std::uint32_t(int block_rows, int head_dim, int rows_in_tensor)> expect_bytes;
  Release release = Release::kAfterOutput;
};

struct Config {
  int stages = kStages;
  int consumers = 2;  // arrivals per phase of empty[s]
  int seqlen = 1000;
  int head_dim = 64;
  int block_rows = kBlockN;
  int n_blocks() const { return (seqlen + block_rows - 1) / block_rows; }
  // The kernel processes the key blocks from the last one down: the i-th block it processes is
  // block n_blocks - 1 - i, and only the last block of the sequence (i = 0) can be ragged.
  int rows_in_tensor(int i) const {
    const int first_row = (n_blocks() - 1 - i) * block_rows;
    return std::min(block_rows, seqlen - first_row);
  }
  std::uint32_t box_bytes() const { return std::uint32_t(block_rows) * head_dim * kElementBytes; }
  std::string describe() const {
    return fmt::format("{} stages, {} consumer{}, N={} ({} block{} of {} rows), D={}", stages, consumers,
                       consumers == 1 ? "" : "s", seqlen, n_blocks(), n_blocks() == 1 ? "" : "s", block_rows, head_dim);
  }
};

enum class Problem { kNone, kBadValue, kDeadlock, kOverrun, kEarlyRead, kBytes, kTooManyArrivals };
inline const char* problem_name(Problem p) {
  switch (p) {
    case Problem::kNone: return "none";
    case Problem::kBadValue: return "bad value";
    case Problem::kDeadlock: return "deadlock";
    case Problem::kOverrun: return "overrun";
    case Problem::kEarlyRead: return "read before the bytes landed";
    case Problem::kBytes: return "byte count";
    case Problem::kTooManyArrivals: return "too many arrivals";
  }
  return "?";
}

struct Finding {
  Problem problem = Problem::kNone;
  std::string what;
  std::vector<std::string> trace;  // the events that lead there, in order
  Config config;
};

namespace detail {

struct Barrier {
  int completed = 0;  // phases completed; the current phase's parity is completed & 1
  int pending = 0;    // arrivals still expected in the current phase
  int tx = 0;         // bytes still expected in the current phase
};
struct Buffer {
  int block = -1;        // the block whose copy was last issued into it (-1: none yet)
  bool landed = true;    // that copy has landed
  int issued_phase = 0;  // the phase of full[s] the copy's bytes belong to
};
struct Thread {
  int i = 0;    // block
  int sub = 0;  // 0: next is the wait; then the actions of the block in order
};
struct State {
  Thread producer;
  std::vector<Thread> consumers;
  std::vector<Barrier> full, empty;
  std::vector<Buffer> k, v;
  std::vector<int> armed_phase;  // per stage: the phase of full[s] the producer last armed
  std::string key() const {
    std::vector<int> w = {producer.i, producer.sub};
    for (const auto& c : consumers) w.insert(w.end(), {c.i, c.sub});
    for (const auto* bars : {&full, &empty})
      for (const auto& b : *bars) w.insert(w.end(), {b.completed, b.pending, b.tx});
    for (const auto* bufs : {&k, &v})
      for (const auto& b : *bufs) w.insert(w.end(), {b.block, b.landed, b.issued_phase});
    w.insert(w.end(), armed_phase.begin(), armed_phase.end());
    return std::string(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(int));
  }
};
enum class Action { kWait, kReadK, kReadV, kRelease };
struct Event {
  int actor;  // -1 producer, 0.. consumer, -2 a copy landing
  int stage = 0;
  bool is_v = false;
};

class Machine {
 public:
  Machine(const Config& config, const Protocol& p) : c_(config), p_(p) {
    for (int i = 0; i < c_.n_blocks(); ++i) {
      st_.push_back(p.stage(i, c_.stages));
      fp_.push_back(p.full_parity(i, c_.stages));
      ep_.push_back(p.empty_parity(i, c_.stages));
      bytes_.push_back(p.expect_bytes(c_.block_rows, c_.head_dim, c_.rows_in_tensor(i)));
    }
    switch (p.release) {
      case Release::kAfterWait: actions_ = {Action::kRelease, Action::kReadK, Action::kReadV}; break;
      case Release::kAfterScores: actions_ = {Action::kReadK, Action::kRelease, Action::kReadV}; break;
      case Release::kAfterOutput: actions_ = {Action::kReadK, Action::kReadV, Action::kRelease}; break;
    }
  }

  State initial() const {
    State s;
    s.consumers.resize(c_.consumers);
    s.full.assign(c_.stages, Barrier{0, 1, 0});
    s.empty.assign(c_.stages, Barrier{0, c_.consumers, 0});
    s.k.assign(c_.stages, Buffer{});
    s.v.assign(c_.stages, Buffer{});
    s.armed_phase.assign(c_.stages, 0);
    return s;
  }

  bool done(const State& s) const {
    if (s.producer.i < c_.n_blocks()) return false;
    for (const auto& t : s.consumers)
      if (t.i < c_.n_blocks()) return false;
    return true;
  }

  static bool passes(const Barrier& b, std::uint32_t parity) { return std::uint32_t(b.completed & 1) != parity; }

  std::vector<Event> enabled(const State& s) const {
    std::vector<Event> out;
    const int n = c_.n_blocks();
    if (s.producer.i < n && (s.producer.sub != 0 || passes(s.empty[st_[s.producer.i]], ep_[s.producer.i])))
      out.push_back({-1});
    for (int c = 0; c < c_.consumers; ++c) {
      const Thread& t = s.consumers[c];
      if (t.i < n && (t.sub != 0 || passes(s.full[st_[t.i]], fp_[t.i]))) out.push_back({c});
    }
    for (int st = 0; st < c_.stages; ++st) {
      if (!s.k[st].landed) out.push_back({-2, st, false});
      if (!s.v[st].landed) out.push_back({-2, st, true});
    }
    return out;
  }

  // One event; returns the problem it shows, if any. `line` receives the event's description.
  std::optional<std::pair<Problem, std::string>> apply(State& s, const Event& e, std::string& line) const {
    if (e.actor == -1) return producer_step(s, line);
    if (e.actor == -2) return land(s, e.stage, e.is_v, line);
    return consumer_step(s, e.actor, line);
  }

  // Why nobody can move (s has no enabled event and is not done): one line per stuck thread, and
  // the one to blame first — a full barrier that waits for bytes no copy will bring, else the
  // producer (the consumers wait for it), else the first consumer.
  std::pair<std::string, std::vector<std::string>> deadlock(const State& s) const {
    std::vector<std::string> lines;
    std::string bytes_line, producer_line;
    auto bar_state = [&](const char* name, int st, const Barrier& b, int count) {
      return fmt::format("{}[{}] has completed {} phase{} (current phase parity {}; {} of {} arrival{} and {} bytes still expected)",
                         name, st, b.completed, b.completed == 1 ? "" : "s", b.completed & 1, b.pending, count,
                         count == 1 ? "" : "s", b.tx);
    };
    for (int c = 0; c < c_.consumers; ++c) {
      const Thread& t = s.consumers[c];
      if (t.i >= c_.n_blocks()) continue;
      const int st = st_[t.i];
      std::string l = fmt::format("consumer {} waits on full[{}] for parity {} (block {}) forever: {}", c, st, fp_[t.i],
                                  t.i, bar_state("full", st, s.full[st], 1));
      if (s.full[st].pending == 0 && s.full[st].tx > 0 && s.k[st].block >= 0) {
        const int j = s.k[st].block;
        l += fmt::format("; no copy in flight will bring those bytes: expect_tx announced {} for block {}, its two copies bring {}",
                         bytes_[j], j, 2 * c_.box_bytes());
        if (bytes_line.empty()) bytes_line = l;
      }
      lines.push_back(l);
    }
    if (s.producer.i < c_.n_blocks()) {
      const int st = st_[s.producer.i];
      producer_line = fmt::format("producer waits on empty[{}] for parity {} (block {}) forever: {}", st,
                                  ep_[s.producer.i], s.producer.i, bar_state("empty", st, s.empty[st], c_.consumers));
      lines.push_back(producer_line);
    }
    const std::string first = !bytes_line.empty() ? bytes_line : !producer_line.empty() ? producer_line : lines.front();
    return {first, lines};
  }

  const Config& config() const { return c_; }

 private:
  void complete_if_done(Barrier& b, int count) const {
    if (b.pending == 0 && b.tx == 0) {
      ++b.completed;
      b.pending = count;
    }
  }
  std::string bytes_hint(int i) const {
    if (bytes_[i] == 2 * c_.box_bytes()) return "";
    return fmt::format(" (expect_tx announced {} bytes for block {}; its two copies bring {})", bytes_[i], i, 2 * c_.box_bytes());
  }
  bool has_read(const State& s, int c, Action which, int block) const {
    const Thread& t = s.consumers[c];
    if (t.i != block) return t.i > block;
    const int a = int(std::find(actions_.begin(), actions_.end(), which) - actions_.begin());
    return t.sub > 1 + a;
  }

  std::optional<std::pair<Problem, std::string>> producer_step(State& s, std::string& line) const {
    Thread& t = s.producer;
    const int i = t.i, st = st_[i];
    std::optional<std::pair<Problem, std::string>> problem;
    switch (t.sub) {
      case 0:
        line = fmt::format("producer  block {}: wait empty[{}] for parity {}: proceeds (empty[{}] has completed {} phase{})", i,
                           st, ep_[i], st, s.empty[st].completed, s.empty[st].completed == 1 ? "" : "s");
        break;
      case 1: {
        Barrier& b = s.full[st];
        line = fmt::format("producer  block {}: arrive.expect_tx(full[{}], {} bytes)", i, st, bytes_[i]);
        if (b.pending == 0) {
          problem = {{Problem::kOverrun,
                      fmt::format("the producer arms full[{}] for block {} while the phase of block {} has not completed (its "
                                  "bytes are still in flight): a second arrival on a barrier of count 1, the stage refilled "
                                  "before it was even full", st, i, s.k[st].block)}};
          break;
        }
        s.armed_phase[st] = b.completed;
        b.tx += int(bytes_[i]);
        --b.pending;
        complete_if_done(b, 1);
        if (b.completed != s.armed_phase[st]) line += fmt::format(" -> full[{}] completes phase {} at once: no bytes to wait for", st, s.armed_phase[st]);
        break;
      }
      case 2:
      case 3: {
        const bool is_v = t.sub == 3;
        Buffer& buf = is_v ? s.v[st] : s.k[st];
        const char* name = is_v ? "V" : "K";
        line = fmt::format("producer  block {}: TMA {} -> stage {} ({} bytes onto full[{}])", i, name, st, c_.box_bytes(), st);
        if (!buf.landed) {
          problem = {{Problem::kOverrun, fmt::format("the producer issues block {}'s {} copy into stage {} while block {}'s is still in flight there",
                                                    i, name, st, buf.block)}};
          break;
        }
        if (buf.block >= 0)
          for (int c = 0; c < c_.consumers; ++c)
            if (!has_read(s, c, is_v ? Action::kReadV : Action::kReadK, buf.block)) {
              problem = {{Problem::kOverrun,
                          fmt::format("the producer overwrites stage {}'s {} with block {} while consumer {} has not read block {}'s {} "
                                      "yet: the stage was released (or the producer's wait passed) too early",
                                      st, name, i, c, buf.block, name)}};
              break;
            }
        if (problem) break;
        buf = Buffer{i, false, s.armed_phase[st]};
        break;
      }
    }
    if (++t.sub == 4) t = Thread{i + 1, 0};
    return problem;
  }

  std::optional<std::pair<Problem, std::string>> land(State& s, int st, bool is_v, std::string& line) const {
    Buffer& buf = is_v ? s.v[st] : s.k[st];
    Barrier& b = s.full[st];
    line = fmt::format("copy      block {}'s {} lands in stage {}: complete_tx(full[{}], {})", buf.block, is_v ? "V" : "K", st,
                       st, c_.box_bytes());
    buf.landed = true;
    if (b.completed != buf.issued_phase)
      return {{Problem::kBytes,
               fmt::format("block {}'s {} copy lands on full[{}] after the phase it belongs to has already completed: consumers "
                           "were told the stage was full before its bytes were there{}", buf.block, is_v ? "V" : "K", st,
                           bytes_hint(buf.block))}};
    if (b.tx < int(c_.box_bytes()))
      return {{Problem::kBytes,
               fmt::format("block {}'s {} copy brings {} bytes to full[{}], whose phase expects only {} more: the barrier "
                           "would count below zero{}", buf.block, is_v ? "V" : "K", c_.box_bytes(), st, b.tx,
                           bytes_hint(buf.block))}};
    b.tx -= int(c_.box_bytes());
    const int before = b.completed;
    complete_if_done(b, 1);
    if (b.completed != before) line += fmt::format(" -> full[{}] completes phase {}", st, before);
    return std::nullopt;
  }

  std::optional<std::pair<Problem, std::string>> consumer_step(State& s, int c, std::string& line) const {
    Thread& t = s.consumers[c];
    const int i = t.i, st = st_[i];
    std::optional<std::pair<Problem, std::string>> problem;
    const Action a = t.sub == 0 ? Action::kWait : actions_[t.sub - 1];
    const std::string who = fmt::format("consumer {}", c);
    switch (a) {
      case Action::kWait:
        line = fmt::format("{:<9} block {}: wait full[{}] for parity {}: proceeds (full[{}] has completed {} phase{})", who, i, st,
                           fp_[i], st, s.full[st].completed, s.full[st].completed == 1 ? "" : "s");
        break;
      case Action::kReadK:
      case Action::kReadV: {
        const bool is_v = a == Action::kReadV;
        const Buffer& buf = is_v ? s.v[st] : s.k[st];
        const char* name = is_v ? "V" : "K";
        line = fmt::format("{:<9} block {}: reads {} in stage {}", who, i, name, st);
        if (buf.block == i && !buf.landed)
          problem = {{Problem::kEarlyRead, fmt::format("consumer {} reads block {}'s {} in stage {} before its bytes have landed{}",
                                                       c, i, name, st, bytes_hint(i))}};
        else if (buf.block < i)
          problem = {{Problem::kEarlyRead,
                      fmt::format("consumer {} reads stage {} for block {}'s {}, but the stage still holds {}: its wait on full[{}] "
                                  "(parity {}) passed before the producer had filled it",
                                  c, st, i, name, buf.block < 0 ? std::string("nothing") : fmt::format("block {}", buf.block), st, fp_[i])}};
        else if (buf.block > i)
          problem = {{Problem::kOverrun, fmt::format("consumer {} reads stage {} for block {}'s {}, but the producer has already "
                                                     "overwritten it with block {}", c, st, i, name, buf.block)}};
        break;
      }
      case Action::kRelease: {
        Barrier& b = s.empty[st];
        line = fmt::format("{:<9} block {}: arrive(empty[{}])", who, i, st);
        if (b.pending == 0) {
          problem = {{Problem::kTooManyArrivals, fmt::format("consumer {} arrives on empty[{}] for block {} in a phase that already "
                                                             "has all its {} arrivals", c, st, i, c_.consumers)}};
          break;
        }
        --b.pending;
        const int before = b.completed;
        complete_if_done(b, c_.consumers);
        if (b.completed != before) line += fmt::format(" -> empty[{}] completes phase {}", st, before);
        break;
      }
    }
    if (++t.sub == 1 + int(actions_.size())) t = Thread{i + 1, 0};
    return problem;
  }

  Config c_;
  Protocol p_;
  std::vector<int> st_;
  std::vector<std::uint32_t> fp_, ep_, bytes_;
  std::vector<Action> actions_;
};

}  // namespace detail

// The answers themselves, for blocks 0 ... 63 and rings of 2-4 stages: a stage in range, a parity
// of 0 or 1, a byte count an mbarrier can hold (its transaction count is 20 bits).
inline Finding check_values(const Protocol& p) {
  for (int stages = 2; stages <= 4; ++stages)
    for (int i = 0; i < 64; ++i) {
      const int s = p.stage(i, stages);
      const std::uint32_t fp = p.full_parity(i, stages), ep = p.empty_parity(i, stages);
      std::string what;
      if (s < 0 || s >= stages) what = fmt::format("stage({}, {}) = {}: not one of the ring's stages 0 ... {}", i, stages, s, stages - 1);
      else if (fp > 1) what = fmt::format("full_parity({}, {}) = {}: a parity is 0 or 1", i, stages, fp);
      else if (ep > 1) what = fmt::format("empty_parity({}, {}) = {}: a parity is 0 or 1", i, stages, ep);
      if (!what.empty()) return {Problem::kBadValue, what, {}, Config{.stages = stages}};
    }
  for (int d : {64, 128})
    for (int rows = 1; rows <= kBlockN; ++rows)
      if (const std::uint32_t b = p.expect_bytes(kBlockN, d, rows); b >= (1u << 20))
        return {Problem::kBadValue, fmt::format("expect_bytes({}, {}, {}) = {}: more than an mbarrier's transaction count holds (2^20 - 1)", kBlockN, d, rows, b), {}, Config{.head_dim = d}};
  return {};
}

// Every interleaving of one configuration (breadth first: the trace is a shortest one).
// `states` receives how many distinct states were reached.
inline Finding explore(const Config& config, const Protocol& p, long& states, long max_states = 3'000'000) {
  detail::Machine m(config, p);
  struct Node { int parent; std::string line; };
  std::vector<detail::State> nodes{m.initial()};
  std::vector<Node> meta{{-1, ""}};
  std::unordered_map<std::string, int> seen{{nodes[0].key(), 0}};
  auto path = [&](int id) {
    std::vector<std::string> out;
    for (; id > 0; id = meta[id].parent) out.push_back(meta[id].line);
    std::reverse(out.begin(), out.end());
    return out;
  };
  std::deque<int> queue{0};
  while (!queue.empty()) {
    const int id = queue.front();
    queue.pop_front();
    const detail::State here = nodes[id];
    const auto events = m.enabled(here);
    if (events.empty() && !m.done(here)) {
      auto [first, lines] = m.deadlock(here);
      auto trace = path(id);
      for (auto& l : lines) trace.push_back("stuck     " + l);
      return {Problem::kDeadlock, first, trace, config};
    }
    for (const auto& e : events) {
      detail::State next = here;
      std::string line;
      if (auto problem = m.apply(next, e, line)) {
        auto trace = path(id);
        trace.push_back(line);
        return {problem->first, problem->second, trace, config};
      }
      auto [it, fresh] = seen.emplace(next.key(), int(nodes.size()));
      if (!fresh) continue;
      nodes.push_back(std::move(next));
      meta.push_back({id, line});
      queue.push_back(it->second);
      if (long(nodes.size()) > max_states) {
        states = long(nodes.size());
        return {};  // too many to enumerate: what was reached is clean
      }
    }
  }
  states = long(nodes.size());
  return {};
}

// `walks` random schedules (seeded: the same every run) of one configuration.
inline Finding random_schedules(const Config& config, const Protocol& p, int walks, std::uint64_t seed) {
  detail::Machine m(config, p);
  std::mt19937_64 rng(seed);
  for (int w = 0; w < walks; ++w) {
    detail::State s = m.initial();
    std::vector<std::string> trace;
    for (;;) {
      const auto events = m.enabled(s);
      if (events.empty()) {
        if (m.done(s)) break;
        auto [first, lines] = m.deadlock(s);
        for (auto& l : lines) trace.push_back("stuck     " + l);
        return {Problem::kDeadlock, first, trace, config};
      }
      const auto& e = events[std::uniform_int_distribution<std::size_t>(0, events.size() - 1)(rng)];
      std::string line;
      auto problem = m.apply(s, e, line);
      trace.push_back(line);
      if (problem) return {problem->first, problem->second, trace, config};
    }
  }
  return {};
}

struct Summary {
  Finding finding;     // the first problem found (problem == kNone: none)
  int configs = 0;     // configurations explored exhaustively
  long states = 0;     // distinct states they reached
  int walks = 0;       // random schedules of the kernel's ring
};

// The whole model check: the values, then every interleaving of small rings (2, 3, 4 stages;
// N from one block to several laps, ragged and not), then random schedules with the kernel's
// own ring (2 stages, 8 consumer warps, up to 16 blocks).
inline Summary check(const Protocol& p) {
  Summary out;
  out.finding = check_values(p);
  if (out.finding.problem != Problem::kNone) return out;
  const std::vector<Config> small = {
      {.stages = 2, .consumers = 2, .seqlen = 1},    {.stages = 2, .consumers = 2, .seqlen = 200},
      {.stages = 2, .consumers = 2, .seqlen = 256},  {.stages = 2, .consumers = 2, .seqlen = 300},
      {.stages = 2, .consumers = 2, .seqlen = 700},  {.stages = 2, .consumers = 2, .seqlen = 1000},
      {.stages = 2, .consumers = 1, .seqlen = 1000, .head_dim = 128},
      {.stages = 3, .consumers = 2, .seqlen = 700},  {.stages = 3, .consumers = 1, .seqlen = 1000},
      {.stages = 4, .consumers = 1, .seqlen = 1200}, {.stages = 2, .consumers = 3, .seqlen = 500, .head_dim = 128},
  };
  for (const auto& c : small) {
    long states = 0;
    out.finding = explore(c, p, states);
    ++out.configs;
    out.states += states;
    if (out.finding.problem != Problem::kNone) return out;
  }
  const std::vector<Config> kernel = {
      {.stages = kStages, .consumers = kConsumerWarps, .seqlen = 2048, .head_dim = 64},
      {.stages = kStages, .consumers = kConsumerWarps, .seqlen = 2000, .head_dim = 128},
      {.stages = kStages, .consumers = kConsumerWarps, .seqlen = 1000, .head_dim = 64},
  };
  std::uint64_t seed = 20261201;
  for (const auto& c : kernel) {
    out.finding = random_schedules(c, p, 200, seed++);
    out.walks += 200;
    if (out.finding.problem != Problem::kNone) return out;
  }
  return out;
}

// The finding as the checker prints it: the problem, then the trace (its last `keep` events).
inline std::string format(const Finding& f, std::size_t keep = 28) {
  std::string s = fmt::format("{}: {}\n", problem_name(f.problem), f.what);
  if (f.trace.empty()) return s;
  const bool before_any = f.trace.front().starts_with("stuck");
  s += fmt::format("  {} ({}):\n", before_any ? "stuck before any event can happen" : "the interleaving", f.config.describe());
  const std::size_t skip = f.trace.size() > keep ? f.trace.size() - keep : 0;
  if (skip) s += fmt::format("    ... {} earlier events\n", skip);
  for (std::size_t i = skip; i < f.trace.size(); ++i) s += fmt::format("    {:>3}. {}\n", i + 1, f.trace[i]);
  return s;
}

}  // namespace lab06::model
