// The event log's record format on its own, over a buffer: records read
// back as written, a group is replayed only when whole, and the scan stops
// at the first torn, damaged or out-of-sequence record.
#include "server/store/log_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/testing/store_test_data.h"

namespace sdg::log_format {
namespace {

using ::testing::ElementsAre;
using testing::ResultOfShard;

// A log's bytes: the magic, then a group per entry of `groups` (the shard
// indices of its events), numbered from 1.
std::string LogBytes(const std::vector<std::vector<int64_t>>& groups) {
  std::string bytes(kMagic);
  uint64_t sequence = 0;
  for (const std::vector<int64_t>& group : groups) {
    for (size_t i = 0; i < group.size(); ++i) {
      LogEvent event = ResultOfShard(group[i]);
      event.set_sequence(++sequence);
      AppendRecord(sequence, event.SerializeAsString(), i + 1 < group.size(),
                   bytes);
    }
  }
  return bytes;
}

struct Scan {
  WholeRecords whole;
  std::vector<int64_t> replayed;  // shard indices, in order
};
Scan ScanOf(const std::string& bytes) {
  Scan scan;
  absl::StatusOr<WholeRecords> whole = ScanWholeRecords(
      static_cast<int64_t>(bytes.size()),
      [&](int64_t offset, size_t n, char* out) -> absl::StatusOr<size_t> {
        if (offset >= static_cast<int64_t>(bytes.size())) return 0;
        const size_t got = std::min(n, bytes.size() - offset);
        std::memcpy(out, bytes.data() + offset, got);
        return got;
      },
      [&](const LogEvent& event) {
        scan.replayed.push_back(event.shard_result().shard_index());
      });
  EXPECT_TRUE(whole.ok()) << whole.status();
  if (whole.ok()) scan.whole = *whole;
  return scan;
}

TEST(LogFormatTest, WholeGroupsReplayInOrderToTheEnd) {
  const std::string bytes = LogBytes({{7}, {8, 9}, {10}});
  Scan scan = ScanOf(bytes);
  EXPECT_THAT(scan.replayed, ElementsAre(7, 8, 9, 10));
  EXPECT_EQ(scan.whole.last_sequence, 4u);
  EXPECT_EQ(scan.whole.end, static_cast<int64_t>(bytes.size()));
}

TEST(LogFormatTest, AGroupCutShortIsLeftOutWhole) {
  const std::string whole_part = LogBytes({{7}});
  const std::string bytes = LogBytes({{7}, {8, 9}});
  // Every cut inside the second group, down to one byte short of it.
  for (size_t cut = whole_part.size() + 1; cut < bytes.size(); ++cut) {
    Scan scan = ScanOf(bytes.substr(0, cut));
    EXPECT_THAT(scan.replayed, ElementsAre(7)) << "cut at " << cut;
    EXPECT_EQ(scan.whole.end, static_cast<int64_t>(whole_part.size()));
    EXPECT_EQ(scan.whole.last_sequence, 1u);
  }
}

TEST(LogFormatTest, AFlippedByteEndsTheScanAtTheRecordBeforeIt) {
  const std::string first = LogBytes({{7}});
  std::string bytes = LogBytes({{7}, {8}, {9}});
  bytes[first.size() + 20] ^= 0x40;  // inside the second record's payload
  Scan scan = ScanOf(bytes);
  EXPECT_THAT(scan.replayed, ElementsAre(7));
  EXPECT_EQ(scan.whole.end, static_cast<int64_t>(first.size()));
}

TEST(LogFormatTest, ARecordOutOfSequenceEndsTheScan) {
  std::string bytes = LogBytes({{7}});
  LogEvent skipped = ResultOfShard(9);
  skipped.set_sequence(3);  // 2 is missing
  AppendRecord(3, skipped.SerializeAsString(), false, bytes);
  Scan scan = ScanOf(bytes);
  EXPECT_THAT(scan.replayed, ElementsAre(7));
  EXPECT_EQ(scan.whole.last_sequence, 1u);
}

TEST(LogFormatTest, TheEventCaseIsReadFromTheTagsWithoutParsing) {
  LogEvent result = ResultOfShard(1);
  EXPECT_EQ(EventCaseOf(result.SerializeAsString()), LogEvent::kShardResult);
  LogEvent finished;
  finished.set_sequence(5);
  finished.mutable_finished();
  EXPECT_EQ(EventCaseOf(finished.SerializeAsString()), LogEvent::kFinished);
  EXPECT_EQ(EventCaseOf("\xff\xff"), LogEvent::EVENT_NOT_SET);
}

}  // namespace
}  // namespace sdg::log_format
