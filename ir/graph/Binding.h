// A graph's dims under a binding: binding them from the inputs' shapes and from each
// result, and checking what a binding makes of the graph's types before anything runs.
// The runtime's executor and the reference interpreter both use these: they are the
// language's shape semantics (the same error for the same binding on every device), not
// an op's numerics, so the oracle stays independent where it checks something.
#pragma once

#include "base/Tensor.h"
#include "ir/graph/Graph.h"

#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace dnnc::ir {

using Binding = std::map<std::string, int64_t>;

// "'conv2d' at line 3"; a fused group is named by the op that makes its first result, as
// the user wrote it.
std::string opWhere(const Op &op);
// Rethrows a run-time error an op's values caused (an index out of range, topk's k) with
// the op and its line in front, unless its message names them already.
[[noreturn]] void rethrowAt(const Op &op, const DataError &e);

// Makes `actual` agree with `expected` under `b`: known dims must match, and a dim with one
// unbound name in it (T, or T0 + iters) binds that name. Returns an error text or "".
std::string unify(const TensorType &expected, const std::vector<int64_t> &actual, Binding &b);

// Dims bound by the inputs of `g` (null: not given) and `preset`, checked against the
// inputs' types and the dims' ranges. Throws DataError.
Binding bindInputs(const Graph &g, const std::vector<const rt::Tensor *> &inputs, Binding preset);

// The shape a value of `t` has under `b`, with an empty optional for each unbound dim.
std::vector<std::optional<int64_t>> expectedShape(const TensorType &t, const Binding &b);

// `t`, made by `op` as its result `v`, agrees with v's type: binds the dims it fixes.
// Throws InternalError when a shape RDP derived does not hold, DataError when the user's
// claim (an annotation, a declared result: EDO and ISVDOS ops) does not.
void bindResult(const Op &op, const Value &v, const rt::Tensor &t, Binding &b);

// Checks the sizes `v` will have under `b` before anything is allocated for it: a dim
// that evaluates negative or past 64 bits, or a tensor past the byte limit, comes from the
// user's bindings or data, so it is a DataError naming the op, the dim and the binding.
// Returns false when a dim of `v` is not bound yet (a size an EDO op or a loop decides).
bool checkValueSize(const Op &op, const Value &v, const Binding &b);
// Only the first of those checks: DataError when a dim of `v` that `b` binds is negative
// (no run can make it; a size past 64 bits or a limit is still a number to ask about).
void checkDimsNotNegative(const Op &op, const Value &v, const Binding &b);
// The values `op` makes, each with the op that makes it: its results, and for a fused
// group its inner ops' too, whose sizes are the user's ops' sizes and are checked though
// no buffer holds them (a fused `ones([B - 5])` ran at B = 3).
std::vector<std::pair<const Op *, const Value *>> madeValues(const Op &op);

// The message of the first assert over dims anywhere in `g` (in branches and loop bodies
// too) that fails under `b`; nullopt when none fails or cannot be decided yet.
std::optional<std::string> failedAssertOf(const Graph &g, const Binding &b);
// An `assert` over dims: DataError when it fails under `b`.
void checkAssert(const Op &op, const Binding &b);
// An assert_dims op (an assert, or a declared type's pin of a fresh dim) under `b`: "" when
// it holds, the failure's message when not, nullopt when `b` leaves one of its dims unbound.
std::optional<std::string> failedAssert(const Op &op, const Binding &b);

// The checks of a binding made before anything is allocated: the asserts about input
// dims, then the sizes of the ops that always run (top level). Remembers the last binding
// it passed and which values it checked, so repeated runs at one shape check once.
class BindingCheck {
public:
  void check(const Graph &g, const Binding &b);
  bool sizeChecked(const Value *v) const { return checked_.count(v) != 0; }

private:
  std::unordered_set<const Value *> checked_; // under checkedFor_
  std::optional<Binding> checkedFor_;
};

// What an op's operands must satisfy under `b` beyond their sizes, checked by every device
// before it runs `op` (or the ops of a fused group), each a DataError naming the op and its
// line:
// - max, min, argmax and argmin of an empty axis have no value (NumPy: "zero-size array to
//   reduction operation maximum which has no identity") unless the result is empty too;
// - a convolution's or pooling's window must fit in its padded input (as PyTorch requires;
//   the output size formula gives 0 there, not an error, for symbolic dims);
// - pad widths given by dims must not be negative (they cropped).
void checkBeforeRunning(const Op &op, const Binding &b);
std::string emptyReductionMessage(const Op &op, const std::string &operand);

} // namespace dnnc::ir
