// src/transfer/transfer_error.cpp: see kvbm/transfer/transfer_error.h.

#include "kvbm/transfer/transfer_error.h"

#include <ostream>
#include <utility>

namespace kvbm {

TransferError to_transfer_error(const io::IoError& error, std::string_view prefix) {
  std::string message(prefix);
  message += error.message;
  return TransferError{error_kind_of_errno(error.code), error.code, std::move(message)};
}

}  // namespace kvbm
