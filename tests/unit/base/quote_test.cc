#include "base/quote.h"

#include <gtest/gtest.h>

#include <string>

namespace sdg {
namespace {

TEST(QuotedTest, ShortTextIsQuotedWhole) {
  EXPECT_EQ(Quoted("job-1"), "\"job-1\"");
  EXPECT_EQ(Quoted(""), "\"\"");
}

TEST(QuotedTest, LongTextIsCutAndSized) {
  const std::string id(1 << 20, 'x');
  EXPECT_EQ(Quoted(id), "\"" + std::string(64, 'x') + "...\" (1048576 bytes)");
}

TEST(QuotedTest, CutFallsBetweenUtf8Characters) {
  // "é" is two bytes: a cut after 4 bytes of "aééx" would split the second.
  EXPECT_EQ(Quoted("a\xC3\xA9\xC3\xA9", 5), "\"a\xC3\xA9\xC3\xA9\"");
  EXPECT_EQ(Quoted("a\xC3\xA9\xC3\xA9x", 4), "\"a\xC3\xA9...\" (6 bytes)");
}

TEST(CutShortTest, LogFieldsAreCutButNotQuoted) {
  EXPECT_EQ(CutShort("job-1"), "job-1");
  EXPECT_EQ(CutShort(std::string(100, 'x')),
            std::string(64, 'x') + "... (100 bytes)");
  EXPECT_EQ(CutShort("a\xC3\xA9\xC3\xA9x", 4), "a\xC3\xA9... (6 bytes)");
}

}  // namespace
}  // namespace sdg
