// Status: the result of every check and launch in fxfuse::kernels (no exceptions, no aborts).
#ifndef FXFUSE_KERNELS_STATUS_H_
#define FXFUSE_KERNELS_STATUS_H_

#include <string>
#include <utility>

namespace fxfuse::kernels {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // a params struct failed its Check()
  kCudaError,        // a CUDA runtime call or a kernel launch failed
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status CudaError(std::string message) {
    return Status(StatusCode::kCudaError, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK", "invalid argument: <message>" or "CUDA error: <message>".
  std::string ToString() const {
    switch (code_) {
      case StatusCode::kOk:
        return "OK";
      case StatusCode::kInvalidArgument:
        return "invalid argument: " + message_;
      case StatusCode::kCudaError:
        return "CUDA error: " + message_;
    }
    return "unknown status: " + message_;
  }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace fxfuse::kernels

// Returns early from the calling function with the status of `expr` if it is not OK.
#define FXFUSE_KERNELS_RETURN_IF_ERROR(expr)             \
  do {                                                   \
    ::fxfuse::kernels::Status fxfuse_status_ = (expr);   \
    if (!fxfuse_status_.ok()) return fxfuse_status_;     \
  } while (0)

#endif  // FXFUSE_KERNELS_STATUS_H_
