#include "kvbm/logging.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include "kvbm/block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace logging_test {

// Restores the default logger when a test ends, whatever happened.
class LoggingTest : public ::testing::Test {
 protected:
  void TearDown() override { set_logger(nullptr); }
};

std::shared_ptr<spdlog::logger> ring_logger(
    std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt>& sink, spdlog::level::level_enum level) {
  sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  sink->set_pattern("%n|%l|%v");
  auto log = std::make_shared<spdlog::logger>("host.kvbm", sink);
  log->set_level(level);
  return log;
}

TEST_F(LoggingTest, DefaultLoggerIsNamedKvbm) {
  auto log = logger();
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->name(), "kvbm");
  EXPECT_EQ(logger(), log);  // created once
}

TEST_F(LoggingTest, ReplacementLoggerReceivesPoolCreation) {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink;
  auto log = ring_logger(sink, spdlog::level::debug);
  set_logger(log);
  EXPECT_EQ(logger(), log);

  auto m = BlockManager<G2>::builder()
               .block_count(8)
               .block_size(32)
               .with_lineage_backend()
               .duplicate_policy(DuplicatePolicy::kReject)
               .build();
  const auto lines = sink->last_formatted();
  ASSERT_EQ(lines.size(), 1U);
  const std::string& line = lines[0];
  EXPECT_NE(line.find("host.kvbm|debug|"), std::string::npos) << line;
  EXPECT_NE(line.find("pool G2"), std::string::npos) << line;
  EXPECT_NE(line.find("8 blocks of 32 tokens"), std::string::npos) << line;
  EXPECT_NE(line.find("lineage eviction"), std::string::npos) << line;
  EXPECT_NE(line.find("reject duplicates"), std::string::npos) << line;
}

TEST_F(LoggingTest, NothingIsLoggedPerBlock) {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink;
  set_logger(ring_logger(sink, spdlog::level::trace));
  auto m = BlockManager<G1>::builder().block_count(4).block_size(16).build();
  const std::size_t after_build = sink->last_formatted().size();
  {
    auto a = test::register_one(m, test::seq(0));
    auto matched = m.match_blocks(std::vector{test::seq(0)});
    auto blocks = m.allocate_blocks(3);
    (void)m.reset_inactive_pool();
  }
  EXPECT_EQ(sink->last_formatted().size(), after_build);
}

TEST_F(LoggingTest, LoggerLevelFiltersDebugLines) {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink;
  set_logger(ring_logger(sink, spdlog::level::info));
  auto m = BlockManager<G1>::builder().block_count(4).block_size(16).build();
  EXPECT_TRUE(sink->last_formatted().empty());
}

TEST_F(LoggingTest, OstreamSinkWorksToo) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto log = std::make_shared<spdlog::logger>("app", sink);
  log->set_level(spdlog::level::debug);
  log->flush_on(spdlog::level::trace);
  set_logger(log);
  auto m = BlockManager<G3>::builder().block_count(2).block_size(4).pool_name("disk").build();
  EXPECT_NE(out.str().find("pool disk: 2 blocks of 4 tokens, lru eviction, allow duplicates"),
            std::string::npos)
      << out.str();
}

TEST_F(LoggingTest, NullRestoresTheDefaultLogger) {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink;
  auto log = ring_logger(sink, spdlog::level::debug);
  set_logger(log);
  set_logger(nullptr);
  auto restored = logger();
  ASSERT_NE(restored, nullptr);
  EXPECT_NE(restored, log);
  EXPECT_EQ(restored->name(), "kvbm");
  // kvbm no longer writes to the replaced logger.
  restored->set_level(spdlog::level::off);  // keep the test output quiet
  auto m = BlockManager<G1>::builder().block_count(1).block_size(1).build();
  EXPECT_TRUE(sink->last_formatted().empty());
}

}  // namespace logging_test
}  // namespace kvbm
