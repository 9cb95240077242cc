// Lifted scalars: 0-d CPU tensor graph inputs that Dynamo made of Python numbers (an `eps`
// default argument, a global FP8 maximum) when it compiles with dynamic shapes. fxfuse treats
// them as runtime scalars; where a value decides whether a rewrite is valid, it uses the
// value the exporter recorded or the one given with `--const NAME=VALUE`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fxfuse::ir {

// A graph input that is a 0-d tensor on the CPU.
bool isLiftedScalarInput(const Value* v);
// The lifted scalar input `v` reads, looking through dtype/device casts; null when `v` is
// not one.
Value* liftedScalarSource(Value* v);
// The value of the lifted scalar `v` reads (recorded or --const); nullopt when `v` is not a
// lifted scalar or its value is unknown.
std::optional<double> liftedScalarValue(Value* v);
// Lifted scalar inputs of the entry graph whose value is unknown, by name.
std::vector<std::string> unknownLiftedScalars(const Module& m);
// The hint every refusal over an unknown lifted scalar ends with.
std::string constFlagHint(const Value& input);

// Applies `--const NAME=VALUE` flags to the entry graph's lifted scalar inputs (overriding
// recorded values). Throws FxError (one line) on a malformed flag or an unknown name.
void applyConstFlags(Module& m, const std::vector<std::string>& flags);

}  // namespace fxfuse::ir
