# Writes proto/dtype.h, the C++ form of fxfuse_ir.proto's `enum DType`: the one dtype enum
# of the IR, both protos (the plan imports it) and the kernels' launch API. Same names and
# numbers as the proto, so converting between the two is a cast.
BEGIN {
  print "// Generated from proto/fxfuse_ir.proto (enum DType) by proto/dtype_h.awk: do not edit."
  print "// The one dtype enum of fxfuse: the IR, both protos and the kernels' launch API use it;"
  print "// names and numbers are the proto's, so a proto value converts by a cast."
  print "#pragma once"
  print ""
  print "#include <cstdint>"
  print ""
  print "namespace fxfuse {"
  print ""
  print "enum class DType : uint8_t {"
}
$1 == "enum" && $2 == "DType" { inside = 1; next }
inside && $1 == "}" { inside = 0; done = 1; next }
inside && $2 == "=" { value = $3; sub(/;.*/, "", value); printf "  %s = %s,\n", $1, value; last = $1 }
END {
  if (!done) { print "dtype_h.awk: no `enum DType { ... }` in the input" > "/dev/stderr"; exit 1 }
  print "};"
  printf "\n// The largest DType value: proto values above it are not dtypes this build knows.\n"
  printf "inline constexpr DType kLastDType = DType::%s;\n", last
  print ""
  print "}  // namespace fxfuse"
}
