// The log's events and the API's: a logged event is sent to watchers as
// the bytes the log holds, so LogEvent must be JobEvent field for field,
// with only its own stage_rows beside.
#include "server/store/log_event.h"

#include <gtest/gtest.h>

#include "sdg/v1/generation.pb.h"

namespace sdg {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

TEST(LogEventTest, HasEveryJobEventFieldWithItsNumberAndType) {
  const Descriptor* api = v1::JobEvent::descriptor();
  const Descriptor* log = LogEvent::descriptor();
  for (int i = 0; i < api->field_count(); ++i) {
    const FieldDescriptor* field = api->field(i);
    const FieldDescriptor* logged = log->FindFieldByNumber(field->number());
    ASSERT_NE(logged, nullptr) << field->name();
    EXPECT_EQ(logged->name(), field->name());
    EXPECT_EQ(logged->type(), field->type()) << field->name();
    EXPECT_EQ(logged->is_repeated(), field->is_repeated()) << field->name();
    if (field->message_type() != nullptr) {
      EXPECT_EQ(logged->message_type(), field->message_type()) << field->name();
    }
  }
  // Only stage_rows is the log's own, and the API never names its number.
  ASSERT_EQ(log->field_count(), api->field_count() + 1);
  const FieldDescriptor* own = log->FindFieldByName("stage_rows");
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(api->FindFieldByNumber(own->number()), nullptr);
  EXPECT_TRUE(api->IsReservedNumber(own->number()));
}

TEST(LogEventTest, ALoggedResultParsesAsTheJobEventAWatcherGets) {
  LogEvent logged;
  logged.set_job_id("j");
  logged.set_sequence(7);
  v1::ShardResult* result = logged.mutable_shard_result();
  result->set_stage(1);
  result->set_shard_index(2);
  result->add_rows()->set_row_index(5);

  v1::JobEvent sent;
  ASSERT_TRUE(sent.ParseFromString(logged.SerializeAsString()));
  EXPECT_EQ(sent.job_id(), "j");
  EXPECT_EQ(sent.sequence(), 7u);
  ASSERT_TRUE(sent.has_shard_result());
  EXPECT_EQ(sent.shard_result().SerializeAsString(),
            logged.shard_result().SerializeAsString());
  EXPECT_TRUE(sent.GetReflection()->GetUnknownFields(sent).empty());
}

}  // namespace
}  // namespace sdg
