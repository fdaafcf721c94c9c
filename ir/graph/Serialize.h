// The graph IR as JSON, so that a built artifact carries its model's host part (control
// flow, host ops, dim checks) to a runtime that has no compiler.
//
// Contract: fromJson(toJson(g)) is a graph that prints exactly as g does and runs the
// same; fromJson throws DataError (naming what is wrong) on any malformed input, and
// never yields a graph that fails ir::verify.
#pragma once

#include "ir/graph/Graph.h"

#include <nlohmann/json_fwd.hpp>

#include <memory>

namespace dnnc::ir {

nlohmann::json toJson(const Graph &g);
std::unique_ptr<Graph> fromJson(const nlohmann::json &j);

// A deep copy of `g` (through JSON), for passes that must not touch the original.
std::unique_ptr<Graph> cloneGraph(const Graph &g);

nlohmann::json exprToJson(sym::ExprRef e);
sym::ExprRef exprFromJson(const nlohmann::json &j);

} // namespace dnnc::ir
