# cython: language_level=3
"""The Deep CFR traversal in C for the Cython + torch backends (docs/design.md sections 3 and 4).

Two walks share one set of per-node routines (policies from network outputs, sampling,
sample rows, values at the end of a path):

* `TraversalCore` runs `width` traversals as suspendable contexts. External sampling
  keeps its recursion on an explicit frame stack (one frame per expanded traverser
  node), so a context can stop at any decision that needs a network and resume when the
  outputs arrive. The driver (`lc_cfr.traversal.torch.workers.run_chunk`) repeats

      rows = core.step(outputs)      # C: resume, advance, pose the next requests
      outputs = forward(core.request_net[:rows], core.request_obs[:rows])

  crossing the C/Python boundary once per batch of requests: the `interleaved` backend.
* `RecursiveTraversal` walks one traversal at a time by plain recursion on the C stack
  and calls a Python `evaluate` at every decision that needs a network, a batch-1
  forward per call: the predecessor's design, kept to show that cost (`recursive`), and
  the worker loop of Option A (`server`, where `evaluate` asks the inference server).

Semantics, random draws and sample slots are those of `lc_cfr/traversal/reference.py`
and the lockstep `jax` backend: traversal j of the quota deals game
traverser * quota + j, draws random_bits(seed, iteration, game, draw, purpose), and owns
the sample slots j * slots + node. The per-node arithmetic follows
`lc_cfr/traversal/policy.py` operation for operation in float32 (sums left to right,
utilities times float32(1 / utility_scale)); the strategy network's softmax uses libm
`expf`/`logf`, so those policies agree with XLA's within float32 rounding, not bit for bit.

A context asks only for the networks a node needs: the mover's advantage network for
the regret-matching policy (skipped at opponent nodes whose policy is a bot, strategy
network or league snapshot when no strategy sample is stored there), plus the strategy
network or the traversal's league snapshot when the opponent plays it.
"""

from libc.math cimport expf, logf
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

import numpy as np

from lc_cfr.traversal.api import CORE_STAT_NAMES, PATH_END_BINS, slots_per_traversal

from lc_cfr.bots.cy_bots cimport LCBotParams, lc_bot_action, lc_bot_params
from lc_cfr.game.cy_engine cimport (
    LC_MAX_ACTIONS,
    LC_PURPOSE_OPPONENT,
    LC_PURPOSE_SAMPLE,
    LCRules,
    LCState,
    lc_apply_unchecked,
    lc_below,
    lc_deal_seed,
    lc_encode,
    lc_legal_mask,
    lc_random_bits,
    lc_rules_from_py,
    lc_uniform,
)

cdef enum:
    MAX_DEPTH = 4          # traversal.max_depth is 1..4
    MAX_EVALS = 2          # network rows one decision can ask for
    END_BINS = 10          # api.PATH_END_BINS (checked when the module loads)
    CTX_IDLE = 0           # no traversal
    CTX_READY = 1          # at a decision whose requests are not posed yet
    CTX_WAITING = 2        # requests posed, waiting for outputs
    NET_STRATEGY = 2       # net ids: 0/1 advantage of player 0/1, 2 strategy,
    NET_LEAGUE = 3         # 3 + k league snapshot k
    OPP_NETWORK = 0
    OPP_BOT = 1
    OPP_AVERAGE = 2
    OPP_LEAGUE = 3

OPPONENT_KINDS = {"network": OPP_NETWORK, "average_strategy": OPP_AVERAGE, "league": OPP_LEAGUE}
# the Stats struct below fills these, in this order (one list: lc_cfr.traversal.api)
STAT_NAMES = CORE_STAT_NAMES
assert PATH_END_BINS == END_BINS, "cy_traversal's END_BINS is api.PATH_END_BINS"


ctypedef struct Frame:
    # An expanded traverser node of external sampling.
    LCState game
    float policy[LC_MAX_ACTIONS]
    float values[LC_MAX_ACTIONS]
    uint8_t mask[LC_MAX_ACTIONS]
    int32_t action          # child being explored
    int64_t slot            # advantage slot of the node (chunk-local)


ctypedef struct Context:
    LCState game
    int32_t status
    int32_t local           # traversal index within the chunk
    uint32_t game_index
    uint32_t draws          # random draws taken (counter word)
    int32_t adv_nodes
    int32_t strat_nodes
    int32_t snapshot
    int32_t top             # frames in use
    uint8_t mask[LC_MAX_ACTIONS]
    int32_t n_evals
    int32_t net[MAX_EVALS]
    int64_t row             # first request row of the pending decision
    Frame frames[MAX_DEPTH]
    int32_t* path_action    # [adv_slots] outcome: sampled action per traverser node
    float* path_prob        # [adv_slots] its sampling probability


ctypedef struct Options:
    int outcome
    float epsilon           # float32(epsilon)
    float keep              # float32(1 - epsilon), rounded from the double as JAX does
    float value_clip
    int unsampled_zero
    int max_depth
    int cutoff_turns
    int rollouts
    int cutoff_rollouts
    float rollout_factor    # float32(1 / cutoff_rollouts)
    float utility_factor    # float32(1 / utility_scale)
    int opponent
    int store_traverser
    int store_opponent
    int fallback_uniform
    int adv_slots
    int strat_slots


ctypedef struct Stats:
    int64_t nodes
    int64_t policy_calls
    int64_t terminals
    int64_t truncations
    int64_t cutoffs
    int64_t endpoint_depth_sum
    int64_t rollout_decisions
    int64_t clipped_values
    int64_t path_ends[END_BINS]


# ----- per-node arithmetic (policy.py, operation for operation) ---------------------

cdef void regret_matching(const float* raw, const uint8_t* mask, int n, int uniform,
                          float* out) noexcept nogil:
    cdef int a, best = -1
    cdef float total = 0.0, count = 0.0, v
    for a in range(n):
        v = raw[a] if mask[a] else 0.0
        out[a] = v if (mask[a] and v > 0.0) else 0.0
        total = total + out[a]
    if total > 0.0:
        for a in range(n):
            out[a] = out[a] / total
        return
    if uniform:
        for a in range(n):
            count = count + (1.0 if mask[a] else 0.0)
        if count < 1.0:
            count = 1.0
        for a in range(n):
            out[a] = (1.0 if mask[a] else 0.0) / count
        return
    for a in range(n):  # first legal action of highest advantage
        if mask[a] and (best < 0 or raw[a] > raw[best]):
            best = a
    for a in range(n):
        out[a] = 1.0 if a == best else 0.0


cdef void masked_softmax(const float* raw, const uint8_t* mask, int n,
                         float* out) noexcept nogil:
    cdef int a, seen = 0
    cdef float top = 0.0, total = 0.0, log_total
    for a in range(n):
        if mask[a] and (not seen or raw[a] > top):
            top = raw[a]
            seen = 1
    for a in range(n):
        if mask[a]:
            total = total + expf(raw[a] - top)
    log_total = logf(total if total > 0.0 else 1.0)
    for a in range(n):
        out[a] = expf((raw[a] - top) - log_total) if mask[a] else 0.0


cdef void explore(const Options* o, const float* policy, const uint8_t* mask, int n,
                  float* out) noexcept nogil:
    cdef int a
    cdef float count = 0.0
    for a in range(n):
        count = count + (1.0 if mask[a] else 0.0)
    if count < 1.0:
        count = 1.0
    for a in range(n):
        out[a] = o.epsilon * ((1.0 if mask[a] else 0.0) / count) + o.keep * policy[a]


cdef int sample_action(const float* probs, const uint8_t* mask, int n,
                       uint32_t bits) noexcept nogil:
    cdef float u = lc_uniform(bits), total = 0.0
    cdef int a, last = -1
    for a in range(n):
        total = total + (probs[a] if mask[a] else 0.0)
        if mask[a]:
            last = a
            if total > u:
                return a
    return last


cdef int next_legal(const uint8_t* mask, int n, int after) noexcept nogil:
    cdef int a
    for a in range(after + 1, n):
        if mask[a]:
            return a
    return -1


# ----- the core --------------------------------------------------------------------

cdef class TraversalCore:
    """`width` suspendable traversal contexts and the sample buffers of one chunk.

    Call `begin` for a chunk of the quota, then `step` until it returns 0 rows; the
    samples are then in `samples()` and the totals in `stats()`.
    """

    cdef LCRules r
    cdef Options o
    cdef LCBotParams opponent_bot
    cdef LCBotParams rollout_bot
    cdef Context* contexts
    cdef readonly int width
    cdef int num_actions, encoding_size
    cdef uint32_t seed, iteration
    cdef int traverser, league_count
    cdef uint32_t game_base
    cdef int next_local, chunk
    cdef int64_t n_rows
    cdef Stats s
    cdef float[:, ::1] req_obs
    cdef int32_t[::1] req_net
    cdef float[:, ::1] adv_info
    cdef uint8_t[:, ::1] adv_mask
    cdef float[:, ::1] adv_target
    cdef uint8_t[::1] adv_valid
    cdef float[:, ::1] strat_info
    cdef uint8_t[:, ::1] strat_mask
    cdef float[:, ::1] strat_policy
    cdef uint8_t[::1] strat_valid
    cdef object arrays

    def __cinit__(self):
        self.contexts = NULL
        self.width = 0

    def __init__(self, rules, options, *, width):
        """`options` is an `api.TraversalOptions` (validated by the caller), `width` the
        contexts advanced together."""
        cdef int i
        cdef Options* o = &self.o
        if width < 1:
            raise ValueError(f"traversal.interleave_width must be >= 1, got {width}")
        lc_rules_from_py(&self.r, rules)
        self.num_actions = self.r.num_actions
        self.encoding_size = self.r.encoding_size
        advantage_slots, strategy_slots = slots_per_traversal(rules, options)
        o.outcome = options.sampling_mode == "outcome"
        o.epsilon = <float>options.outcome_sampling_epsilon
        o.keep = <float>(1.0 - options.outcome_sampling_epsilon)
        o.value_clip = <float>options.outcome_sampling_value_clip
        o.unsampled_zero = options.outcome_unsampled_regret == "zero"
        o.max_depth = options.max_depth
        o.cutoff_turns = options.cutoff_turns
        o.rollouts = options.cutoff_value_mode == "rollouts"
        o.cutoff_rollouts = options.cutoff_rollouts
        o.rollout_factor = <float>(1.0 / max(options.cutoff_rollouts, 1))
        o.utility_factor = <float>(1.0 / options.utility_scale)
        if options.opponent_policy in OPPONENT_KINDS:
            o.opponent = OPPONENT_KINDS[options.opponent_policy]
        else:
            o.opponent = OPP_BOT
            lc_bot_params(&self.opponent_bot, options.opponent_policy, "traversal.opponent_policy")
        lc_bot_params(&self.rollout_bot, options.cutoff_rollout_policy, "traversal.cutoff_rollout_policy")
        o.store_traverser = options.strategy_samples in ("traverser", "both")
        o.store_opponent = options.strategy_samples in ("opponent", "both")
        o.fallback_uniform = options.all_negative_fallback == "uniform"
        o.adv_slots = advantage_slots
        o.strat_slots = strategy_slots
        self.contexts = <Context*>malloc(width * sizeof(Context))
        if self.contexts == NULL:
            raise MemoryError()
        memset(self.contexts, 0, width * sizeof(Context))
        self.width = width
        for i in range(width):
            self.contexts[i].path_action = <int32_t*>malloc(max(advantage_slots, 1) * sizeof(int32_t))
            self.contexts[i].path_prob = <float*>malloc(max(advantage_slots, 1) * sizeof(float))
            if self.contexts[i].path_action == NULL or self.contexts[i].path_prob == NULL:
                raise MemoryError()
        self.req_obs = np.zeros((MAX_EVALS * width, self.encoding_size), np.float32)
        self.req_net = np.zeros((MAX_EVALS * width,), np.int32)
        self.chunk = 0

    def __dealloc__(self):
        cdef int i
        if self.contexts != NULL:
            for i in range(self.width):
                free(self.contexts[i].path_action)
                free(self.contexts[i].path_prob)
            free(self.contexts)

    @property
    def request_obs(self):
        """[2 * width, E] float32 encodings of the posed rows (the first `step()` rows)."""
        return np.asarray(self.req_obs)

    @property
    def request_net(self):
        """[2 * width] int32 net id of each posed row."""
        return np.asarray(self.req_net)

    def begin(self, *, seed, iteration, traverser, game_base, start, count, league_count):
        """Starts a chunk: traversals start .. start + count - 1 of the quota, dealing
        game game_base + j for traversal j; all buffers and totals are cleared."""
        cdef int i
        adv_rows = count * self.o.adv_slots
        strat_rows = count * self.o.strat_slots
        e, a = self.encoding_size, self.num_actions
        self.arrays = {
            "advantage_info": np.zeros((adv_rows, e), np.float32),
            "advantage_mask": np.zeros((adv_rows, a), np.uint8),
            "advantage_target": np.zeros((adv_rows, a), np.float32),
            "advantage_valid": np.zeros((adv_rows,), np.uint8),
            "strategy_info": np.zeros((strat_rows, e), np.float32),
            "strategy_mask": np.zeros((strat_rows, a), np.uint8),
            "strategy_policy": np.zeros((strat_rows, a), np.float32),
            "strategy_valid": np.zeros((strat_rows,), np.uint8),
        }
        self.adv_info = self.arrays["advantage_info"]
        self.adv_mask = self.arrays["advantage_mask"]
        self.adv_target = self.arrays["advantage_target"]
        self.adv_valid = self.arrays["advantage_valid"]
        self.strat_info = self.arrays["strategy_info"]
        self.strat_mask = self.arrays["strategy_mask"]
        self.strat_policy = self.arrays["strategy_policy"]
        self.strat_valid = self.arrays["strategy_valid"]
        self.seed = <uint32_t>seed
        self.iteration = <uint32_t>iteration
        self.traverser = traverser
        self.league_count = max(int(league_count), 1)
        self.game_base = <uint32_t>(game_base + start)
        self.chunk = count
        self.next_local = 0
        self.n_rows = 0
        memset(&self.s, 0, sizeof(Stats))
        for i in range(self.width):
            self.contexts[i].status = CTX_IDLE

    def step(self, const float[:, ::1] outputs=None):
        """Resumes the waiting contexts with `outputs` ([rows of the last step, A] raw
        network outputs in request order), advances every context to its next request
        and returns the number of rows posed (0: the chunk is finished)."""
        cdef int i
        cdef Context* c
        if self.n_rows:
            if outputs is None or outputs.shape[0] < self.n_rows or outputs.shape[1] != self.num_actions:
                raise ValueError(
                    f"step needs outputs of shape ({self.n_rows}, {self.num_actions}) "
                    f"for the posed rows, got {None if outputs is None else outputs.shape}"
                )
            with nogil:
                for i in range(self.width):
                    c = &self.contexts[i]
                    if c.status == CTX_WAITING:
                        self._finish(c, &outputs[c.row, 0],
                                     &outputs[c.row + 1, 0] if c.n_evals > 1 else NULL)
        self.n_rows = 0
        with nogil:
            for i in range(self.width):
                c = &self.contexts[i]
                while True:
                    if c.status == CTX_IDLE:
                        if self.next_local >= self.chunk:
                            break
                        self._start(c)
                    if c.status == CTX_READY:
                        self._pose(c)
                    if c.status == CTX_WAITING:
                        break
        return self.n_rows

    def samples(self):
        """The chunk's sample buffers (dict of numpy arrays, fixed slots
        local_traversal * slots + node; `*_valid` marks filled rows)."""
        return self.arrays

    def stats(self):
        """The chunk's totals as a dict of ints (`STAT_NAMES`)."""
        return {name: int(value) for name, value in zip(STAT_NAMES, (
            self.s.nodes, self.s.policy_calls, self.s.terminals, self.s.truncations,
            self.s.cutoffs, self.s.endpoint_depth_sum, self.s.rollout_decisions,
            self.s.clipped_values, *[self.s.path_ends[k] for k in range(END_BINS)]))}

    # ----- context life cycle ------------------------------------------------------

    cdef void _start(self, Context* c) noexcept nogil:
        c.local = self.next_local
        self.next_local += 1
        c.game_index = self.game_base + <uint32_t>c.local
        c.draws = 0
        c.adv_nodes = 0
        c.strat_nodes = 0
        c.top = 0
        c.snapshot = lc_below(
            lc_random_bits(self.seed, self.iteration, c.game_index, 0, LC_PURPOSE_OPPONENT),
            <uint32_t>self.league_count,
        )
        lc_deal_seed(&self.r, &c.game, self.seed, c.game_index, self.iteration)
        c.status = CTX_READY

    cdef bint _stores(self, Context* c, bint is_traverser) noexcept nogil:
        """Whether a strategy sample is stored at this decision (c.top: expanded above)."""
        if not (self.o.outcome or c.top < self.o.max_depth):
            return False
        return self.o.store_traverser if is_traverser else self.o.store_opponent

    cdef int _requests(self, Context* c, const LCState* g) noexcept nogil:
        """Fills c.mask and the networks the decision at g needs (c.net[:c.n_evals])."""
        cdef int mover = g.current_player
        cdef bint is_traverser = mover == self.traverser
        lc_legal_mask(&self.r, g, c.mask)
        c.n_evals = 0
        if is_traverser or self.o.opponent == OPP_NETWORK or self._stores(c, False):
            c.net[c.n_evals] = mover
            c.n_evals += 1
        if not is_traverser and self.o.opponent == OPP_AVERAGE:
            c.net[c.n_evals] = NET_STRATEGY
            c.n_evals += 1
        elif not is_traverser and self.o.opponent == OPP_LEAGUE:
            c.net[c.n_evals] = NET_LEAGUE + c.snapshot
            c.n_evals += 1
        return c.n_evals

    cdef void _encode_rows(self, Context* c, const LCState* g) noexcept nogil:
        """Writes the decision's request rows from c.row on (encoding and net id)."""
        cdef int i
        lc_encode(&self.r, g, g.current_player, &self.req_obs[c.row, 0])
        for i in range(c.n_evals):
            if i:
                memcpy(&self.req_obs[c.row + i, 0], &self.req_obs[c.row, 0],
                       self.encoding_size * sizeof(float))
            self.req_net[c.row + i] = c.net[i]

    cdef void _play(self, Context* c, const LCState* g, const float* obs, const float* out0,
                    const float* out1, float* played) noexcept nogil:
        """The policy played at g from the network outputs; stores the strategy sample
        (the mover's regret-matching policy) where one is due and counts the node."""
        cdef int n = self.num_actions
        cdef int mover = g.current_player
        cdef bint is_traverser = mover == self.traverser
        cdef bint has_current = c.n_evals > 0 and c.net[0] == mover
        cdef float current[LC_MAX_ACTIONS]
        cdef int a, action
        cdef int64_t slot
        if has_current:
            regret_matching(out0, c.mask, n, self.o.fallback_uniform, current)
        if is_traverser or self.o.opponent == OPP_NETWORK:
            memcpy(played, current, n * sizeof(float))
        elif self.o.opponent == OPP_BOT:
            action = lc_bot_action(&self.r, g, &self.opponent_bot, self.seed,
                                   self.iteration, c.game_index, c.draws)
            for a in range(n):
                played[a] = 1.0 if a == action else 0.0
        else:
            masked_softmax(out1 if has_current else out0, c.mask, n, played)
        if self._stores(c, is_traverser):
            slot = <int64_t>c.local * self.o.strat_slots + c.strat_nodes
            memcpy(&self.strat_info[slot, 0], obs, self.encoding_size * sizeof(float))
            memcpy(&self.strat_mask[slot, 0], c.mask, n)
            memcpy(&self.strat_policy[slot, 0], current, n * sizeof(float))
            self.strat_valid[slot] = 1
            c.strat_nodes += 1
        self.s.nodes += 1
        self.s.policy_calls += c.n_evals

    cdef int _sample(self, Context* c, const float* probs) noexcept nogil:
        """An action drawn from probs with the traversal's next SAMPLE draw."""
        cdef int action = sample_action(probs, c.mask, self.num_actions, lc_random_bits(
            self.seed, self.iteration, c.game_index, c.draws, LC_PURPOSE_SAMPLE))
        c.draws += 1
        return action

    cdef int _outcome_move(self, Context* c, const LCState* g, const float* obs,
                           const float* played) noexcept nogil:
        """Outcome sampling: the move at g (the traverser explores); a traverser node
        keeps sigma in its target row and (a*, sigma'(a*)) on the path until the end."""
        cdef int n = self.num_actions
        cdef float behaviour[LC_MAX_ACTIONS]
        cdef int action
        cdef int64_t slot
        if g.current_player != self.traverser:
            return self._sample(c, played)
        explore(&self.o, played, c.mask, n, behaviour)
        action = self._sample(c, behaviour)
        slot = <int64_t>c.local * self.o.adv_slots + c.adv_nodes
        self._advantage_row(slot, obs, c.mask)
        memcpy(&self.adv_target[slot, 0], played, n * sizeof(float))
        c.path_action[c.adv_nodes] = action
        c.path_prob[c.adv_nodes] = behaviour[action]
        c.adv_nodes += 1
        return action

    cdef int64_t _expanded_node(self, Context* c, const float* obs) noexcept nogil:
        """External sampling: the advantage slot of a node expanded now (info, mask)."""
        cdef int64_t slot = <int64_t>c.local * self.o.adv_slots + c.adv_nodes
        c.adv_nodes += 1
        self._advantage_row(slot, obs, c.mask)
        return slot

    # ----- the suspendable walk (explicit frame stack) ----------------------------------

    cdef void _pose(self, Context* c) noexcept nogil:
        """Poses the network rows the decision needs, or finishes it at once if none."""
        if self._requests(c, &c.game) == 0:  # a bot plays and nothing is stored
            self._finish(c, NULL, NULL)
            return
        c.row = self.n_rows
        self._encode_rows(c, &c.game)
        self.n_rows += c.n_evals
        c.status = CTX_WAITING

    cdef void _finish(self, Context* c, const float* out0, const float* out1) noexcept nogil:
        """Takes the decision with the network outputs and walks on to the next one."""
        cdef int n = self.num_actions
        cdef float played[LC_MAX_ACTIONS]
        cdef const float* obs = &self.req_obs[c.row, 0] if c.n_evals else NULL
        cdef int action
        cdef Frame* f
        self._play(c, &c.game, obs, out0, out1, played)
        c.status = CTX_READY
        if self.o.outcome:
            action = self._outcome_move(c, &c.game, obs, played)
        elif c.game.current_player == self.traverser and c.top < self.o.max_depth:
            f = &c.frames[c.top]  # expand: push a frame, walk into the first child
            c.top += 1
            memcpy(&f.game, &c.game, sizeof(LCState))
            memcpy(f.policy, played, n * sizeof(float))
            memcpy(f.mask, c.mask, n)
            memset(f.values, 0, n * sizeof(float))
            f.action = next_legal(c.mask, n, -1)
            f.slot = self._expanded_node(c, obs)
            action = f.action
        else:
            action = self._sample(c, played)
        lc_apply_unchecked(&self.r, &c.game, action)
        self._arrive(c)

    cdef void _advantage_row(self, int64_t slot, const float* obs, const uint8_t* mask) noexcept nogil:
        memcpy(&self.adv_info[slot, 0], obs, self.encoding_size * sizeof(float))
        memcpy(&self.adv_mask[slot, 0], mask, self.num_actions)
        self.adv_valid[slot] = 1

    cdef int _ended(self, const LCState* g, bint* cut) noexcept nogil:
        """Whether a position reached by a move ends the path (counting it if so)."""
        cut[0] = (self.o.cutoff_turns > 0 and not g.terminal
                  and g.turn >= self.o.cutoff_turns)
        if not (g.terminal or cut[0]):
            return 0
        self.s.terminals += (g.terminal != 0) & (g.truncated == 0)
        self.s.truncations += g.truncated != 0
        self.s.cutoffs += cut[0]
        self.s.endpoint_depth_sum += 2 * g.turn + g.phase
        # api.path_end_bin
        self.s.path_ends[min(g.turn * END_BINS // self.r.max_turns, END_BINS - 1)] += 1
        return 1

    cdef float _utility(self, const LCState* g) noexcept nogil:
        cdef float diff = <float>(g.scores[self.traverser] - g.scores[1 - self.traverser])
        return diff * self.o.utility_factor

    cdef float _value_at_end(self, Context* c, const LCState* g, bint cut) noexcept nogil:
        """The traverser's value of an ended path: utility, or the mean of playouts."""
        cdef LCState game
        cdef float total = 0.0
        cdef int k, action
        if not (cut and self.o.rollouts):
            return self._utility(g)
        for k in range(self.o.cutoff_rollouts):
            memcpy(&game, g, sizeof(LCState))
            while not game.terminal:
                action = lc_bot_action(&self.r, &game, &self.rollout_bot, self.seed,
                                       self.iteration, c.game_index, c.draws)
                c.draws += 1
                lc_apply_unchecked(&self.r, &game, action)
                self.s.rollout_decisions += 1
            total = total + self._utility(&game)
        return total * self.o.rollout_factor

    cdef void _arrive(self, Context* c) noexcept nogil:
        """After a move: carry on (READY), or hand the path's value back."""
        cdef bint cut
        cdef float value
        cdef Frame* f
        cdef int following
        if not self._ended(&c.game, &cut):
            return
        value = self._value_at_end(c, &c.game, cut)
        if self.o.outcome:
            self._outcome_targets(c, value)
            c.status = CTX_IDLE
            return
        while True:  # external: give the value to the frames above
            if c.top == 0:
                c.status = CTX_IDLE
                return
            f = &c.frames[c.top - 1]
            f.values[f.action] = value
            following = next_legal(f.mask, self.num_actions, f.action)
            if following >= 0:
                f.action = following
                memcpy(&c.game, &f.game, sizeof(LCState))
                lc_apply_unchecked(&self.r, &c.game, following)
                if not self._ended(&c.game, &cut):
                    return
                value = self._value_at_end(c, &c.game, cut)
                continue
            value = self._node_regrets(f.policy, f.values, f.mask, f.slot)
            c.top -= 1

    cdef float _node_regrets(self, const float* policy, const float* values,
                             const uint8_t* mask, int64_t slot) noexcept nogil:
        """Writes r(a) = v(a) - v at the slot and returns v = sum sigma(a) v(a)."""
        cdef int a
        cdef float node_value = 0.0
        for a in range(self.num_actions):
            node_value = node_value + policy[a] * values[a]
        for a in range(self.num_actions):
            self.adv_target[slot, a] = (values[a] - node_value) if mask[a] else 0.0
        return node_value

    cdef void _outcome_targets(self, Context* c, float utility) noexcept nogil:
        cdef int k, a, action
        cdef float weight = 1.0, value, prob, chosen, ratio
        cdef int64_t slot
        cdef float* row
        cdef const uint8_t* mask
        for k in range(c.adv_nodes - 1, -1, -1):  # right to left: W_k, then fold in k
            slot = <int64_t>c.local * self.o.adv_slots + k
            row = &self.adv_target[slot, 0]
            mask = &self.adv_mask[slot, 0]
            action = c.path_action[k]
            prob = c.path_prob[k]
            chosen = row[action]
            ratio = chosen / prob
            value = weight * utility / prob
            if self.o.value_clip > 0.0:
                self.s.clipped_values += (value > self.o.value_clip) | (value < -self.o.value_clip)
                value = min(max(value, -self.o.value_clip), self.o.value_clip)
            for a in range(self.num_actions):
                if not mask[a]:
                    row[a] = 0.0
                elif a == action:
                    row[a] = (1.0 - chosen) * value
                elif self.o.unsampled_zero:
                    row[a] = 0.0
                else:
                    row[a] = -chosen * value
            weight = weight * ratio


cdef class RecursiveTraversal(TraversalCore):
    """The traversal as plain recursion, one traversal at a time (`recursive`, `server`).

    `run(evaluate)` walks each traversal of the chunk depth first on the C call stack
    and calls the Python function `evaluate(net_ids, obs)` at every decision that needs a
    network (a batch of one decision's rows). It shares the per-node code of
    `TraversalCore` (policies, sampling, samples, values at the end of a path) and
    replaces only its control flow, so the two walks check each other in the tests.
    """

    cdef object evaluate

    def __init__(self, rules, options):
        """As `TraversalCore`, one traversal at a time."""
        TraversalCore.__init__(self, rules, options, width=1)

    def step(self, outputs=None):
        raise TypeError("RecursiveTraversal is driven by run(evaluate), not step()")

    def run(self, evaluate):
        """Runs every traversal of the chunk opened by `begin`.

        Args:
            evaluate: evaluate(net_ids [R] int32, obs [R, E] float32) -> [R, A] float32
                raw network outputs; called once per decision that needs a network.
        """
        cdef Context* c = &self.contexts[0]
        cdef LCState root
        self.evaluate = evaluate
        try:
            while self.next_local < self.chunk:
                self._start(c)
                memcpy(&root, &c.game, sizeof(LCState))
                if self.o.outcome:
                    self._outcome_path(c, &root)
                else:
                    self._external(c, &root, 0)
                c.status = CTX_IDLE
        finally:
            self.evaluate = None

    cdef int _decide(self, Context* c, const LCState* g, float* played) except -1:
        """The decision's policy at g, asking `evaluate` for the rows it needs."""
        cdef const float[:, ::1] out
        cdef int n = self._requests(c, g)
        if n == 0:
            self._play(c, g, NULL, NULL, NULL, played)
            return 0
        c.row = 0
        self._encode_rows(c, g)
        result = self.evaluate(np.asarray(self.req_net[:n]), np.asarray(self.req_obs[:n]))
        out = np.ascontiguousarray(result, dtype=np.float32)
        if out.shape[0] != n or out.shape[1] != self.num_actions:
            raise ValueError(
                f"evaluate returned shape {tuple(out.shape)[:2]}, expected "
                f"({n}, {self.num_actions})"
            )
        self._play(c, g, &self.req_obs[0, 0], &out[0, 0], &out[1, 0] if n > 1 else NULL,
                   played)
        return 0

    cdef int _outcome_path(self, Context* c, const LCState* root) except -1:
        """Outcome sampling: one sampled path, then the targets of its traverser nodes."""
        cdef LCState g
        cdef float played[LC_MAX_ACTIONS]
        cdef bint cut
        cdef int action
        memcpy(&g, root, sizeof(LCState))
        while True:
            self._decide(c, &g, played)
            action = self._outcome_move(c, &g, &self.req_obs[0, 0], played)
            lc_apply_unchecked(&self.r, &g, action)
            if self._ended(&g, &cut):
                self._outcome_targets(c, self._value_at_end(c, &g, cut))
                return 0

    cdef float _external(self, Context* c, const LCState* start, int expanded) except *:
        """External sampling: the traverser's value of `start`, `expanded` traverser
        nodes having been expanded above it."""
        cdef LCState g
        cdef float played[LC_MAX_ACTIONS]
        cdef bint cut
        memcpy(&g, start, sizeof(LCState))
        while True:
            c.top = expanded  # what _stores reads as the depth in the tree
            self._decide(c, &g, played)
            if g.current_player == self.traverser and expanded < self.o.max_depth:
                return self._expand(c, &g, played, expanded)
            lc_apply_unchecked(&self.r, &g, self._sample(c, played))
            if self._ended(&g, &cut):
                return self._value_at_end(c, &g, cut)

    cdef float _expand(self, Context* c, const LCState* g, const float* played,
                       int expanded) except *:
        """Every legal action of a traverser node: r(a) = v(a) - v, returns v."""
        cdef float policy[LC_MAX_ACTIONS]
        cdef float values[LC_MAX_ACTIONS]
        cdef uint8_t mask[LC_MAX_ACTIONS]
        cdef LCState child
        cdef bint cut
        cdef int n = self.num_actions
        cdef int action
        cdef int64_t slot = self._expanded_node(c, &self.req_obs[0, 0])
        memcpy(policy, played, n * sizeof(float))
        memcpy(mask, c.mask, n)  # the children overwrite c.mask
        memset(values, 0, n * sizeof(float))
        action = next_legal(mask, n, -1)
        while action >= 0:
            memcpy(&child, g, sizeof(LCState))
            lc_apply_unchecked(&self.r, &child, action)
            if self._ended(&child, &cut):
                values[action] = self._value_at_end(c, &child, cut)
            else:
                values[action] = self._external(c, &child, expanded + 1)
            action = next_legal(mask, n, action)
        return self._node_regrets(policy, values, mask, slot)
