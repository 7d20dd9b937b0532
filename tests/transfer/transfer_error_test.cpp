// tests/transfer/transfer_error_test.cpp: an I/O failure's TransferError, its
// kind by errno value, and how it prints.

#include "kvbm/transfer/transfer_error.h"

#include <cerrno>
#include <sstream>

#include <gtest/gtest.h>

namespace kvbm {
namespace transfer_error_test {

TEST(TransferError, AnIoErrorKeepsItsCodeAndGainsItsKind) {
  const struct {
    int code;
    ErrorKind kind;
  } cases[] = {{EIO, ErrorKind::kIo},         {ENODATA, ErrorKind::kIo},
               {ENOSPC, ErrorKind::kNoSpace}, {EDQUOT, ErrorKind::kNoSpace},
               {EFBIG, ErrorKind::kNoSpace},  {EBADMSG, ErrorKind::kCorrupt},
               {ENOMEM, ErrorKind::kNoMemory}};
  for (const auto& c : cases) {
    const TransferError e = to_transfer_error(io::make_io_error(c.code, "pwrite"), "slot 3: ");
    EXPECT_EQ(e.kind, c.kind) << c.code;
    EXPECT_EQ(e.code, c.code);
    EXPECT_EQ(e.message.rfind("slot 3: pwrite: ", 0), 0U) << e.message;
  }
}

TEST(TransferError, PrintsItsKindAndMessage) {
  std::ostringstream out;
  out << TransferError{ErrorKind::kCorrupt, EBADMSG, "checksum mismatch"};
  EXPECT_EQ(out.str(), "corrupt: checksum mismatch");
}

TEST(ErrorKind, EveryKindHasAName) {
  for (const ErrorKind k : {ErrorKind::kIo, ErrorKind::kNoSpace, ErrorKind::kCorrupt,
                            ErrorKind::kDevice, ErrorKind::kNoMemory, ErrorKind::kRefused,
                            ErrorKind::kInternal, ErrorKind::kUnavailable, ErrorKind::kTimeout}) {
    EXPECT_NE(to_string(k), "unknown");
  }
  EXPECT_EQ(to_string(ErrorKind::kNoSpace), "no_space");
}

TEST(RuntimeError, IsARuntimeErrorWithKindAndCode) {
  try {
    throw RuntimeError(ErrorKind::kNoSpace, ENOSPC, "disk full; free space");
  } catch (const std::runtime_error& e) {
    const auto* r = dynamic_cast<const RuntimeError*>(&e);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->kind(), ErrorKind::kNoSpace);
    EXPECT_EQ(r->code(), ENOSPC);
    EXPECT_STREQ(e.what(), "disk full; free space");
  }
  static_assert(!std::is_base_of_v<std::logic_error, RuntimeError>,
                "never confused with UsageError");
}

}  // namespace transfer_error_test
}  // namespace kvbm
