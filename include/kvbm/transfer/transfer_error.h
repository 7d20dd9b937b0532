// kvbm/transfer/transfer_error.h: why a copy failed, as a value.
//
// Every transfer engine reports a failed batch the same way: the indices of
// the pairs that failed and one TransferError, the first failure, in the
// batch's TransferOutcome (kvbm/transfer/transfer_engine.h). Its kind says
// what happened (ErrorKind, kvbm/error.h):
//
//   kIo, kNoSpace  a syscall failed (code: errno): a disk read or write
//   kCorrupt       a disk slot failed verification (checksum, footer, the
//                  hash it was written for); its bytes were not used
//   kDevice        a CUDA call failed (code: cudaError_t)
//   kNoMemory      host memory ran out while the batch ran
//   kRefused       submit() threw (a refused batch, or no memory for it);
//                  set by submit_or_refuse(), never by an engine itself
//   kInternal      an unexpected exception inside an engine: a bug, logged
//
// `message` names the engine, the pair and the call that failed, in words.
// Below the engines, the I/O primitives (kvbm/io/syscalls.h) report an
// IoError (errno and message): to_transfer_error() is the one conversion.
//
// Thread-safety: a plain value.

#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

#include "kvbm/error.h"
#include "kvbm/io/syscalls.h"

namespace kvbm {

/// One failure of a transfer: the library's Error value (kvbm/error.h).
using TransferError = Error;

/// Returns the TransferError of an I/O failure: the kind of its errno value
/// (error_kind_of_errno), its code, and `prefix` followed by its message.
[[nodiscard]] TransferError to_transfer_error(const io::IoError& error,
                                              std::string_view prefix = {});

}  // namespace kvbm
