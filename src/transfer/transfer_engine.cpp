// src/transfer/transfer_engine.cpp: the batch check every engine makes, and
// submit_or_refuse(). See kvbm/transfer/transfer_engine.h.

#include "kvbm/transfer/transfer_engine.h"

#include <algorithm>
#include <new>
#include <string>
#include <vector>

#include "kvbm/error.h"

namespace kvbm {

void TransferEngine::check_batch(std::string_view engine, std::span<const TransferPair> pairs,
                                 std::size_t src_blocks, std::size_t dst_blocks) {
  KVBM_CHECK(!pairs.empty(), "transfer engine '", engine,
             "': submit() needs at least one pair; an empty batch is refused");
  std::vector<BlockId> dsts(pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    KVBM_CHECK(pairs[i].src < src_blocks, "transfer engine '", engine, "': source block ",
               pairs[i].src, " (pair ", i, ") out of range; the source has ", src_blocks,
               " blocks");
    KVBM_CHECK(pairs[i].dst < dst_blocks, "transfer engine '", engine, "': destination block ",
               pairs[i].dst, " (pair ", i, ") out of range; the destination has ", dst_blocks,
               " blocks");
    dsts[i] = pairs[i].dst;
  }
  std::sort(dsts.begin(), dsts.end());
  const auto dup = std::adjacent_find(dsts.begin(), dsts.end());
  KVBM_CHECK(dup == dsts.end(), "transfer engine '", engine, "': destination block ",
             dup == dsts.end() ? 0 : *dup,
             " appears twice in one batch; each destination block may be written once per batch");
}

std::shared_ptr<TransferCompletion> submit_or_refuse(TransferEngine& engine,
                                                     std::span<const TransferPair> pairs) {
  TransferError error;
  try {
    return engine.submit(pairs);
  } catch (const std::bad_alloc&) {
    error = {ErrorKind::kNoMemory, 0, std::string(engine.name()) + ": out of memory in submit()"};
  } catch (const std::exception& e) {
    error = {ErrorKind::kRefused, 0, std::string("transfer engine refused the batch: ") + e.what()};
  }
  auto completion = std::make_shared<TransferCompletion>();
  completion->complete(TransferOutcome::all_failed(pairs.size(), std::move(error)));
  return completion;
}

}  // namespace kvbm
