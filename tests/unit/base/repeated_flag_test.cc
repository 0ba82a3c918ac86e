#include "base/repeated_flag.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sdg {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Strings(const std::vector<char*>& args) {
  return std::vector<std::string>(args.begin(), args.end());
}

TEST(TakeRepeatedFlagTest, CollectsEveryFormInOrderAndRemovesThem) {
  std::string a[] = {"sdgd",          "--backend=a=http://x/v1,http://y/v1",
                     "--listen=:1",   "--backend",
                     "b=http://z/v1", "-backend=c=http://w/v1"};
  std::vector<char*> args;
  for (std::string& s : a) args.push_back(s.data());
  EXPECT_THAT(TakeRepeatedFlag("backend", args),
              ElementsAre("a=http://x/v1,http://y/v1", "b=http://z/v1",
                          "c=http://w/v1"));
  EXPECT_THAT(Strings(args), ElementsAre("sdgd", "--listen=:1"));
}

TEST(TakeRepeatedFlagTest, LeavesOtherFlagsWithTheSamePrefix) {
  std::string a[] = {"sdgd", "--backend_max_attempts=2", "--", "--backend=x"};
  std::vector<char*> args;
  for (std::string& s : a) args.push_back(s.data());
  EXPECT_TRUE(TakeRepeatedFlag("backend", args).empty());
  EXPECT_THAT(Strings(args), ElementsAre("sdgd", "--backend_max_attempts=2",
                                         "--", "--backend=x"));
}

}  // namespace
}  // namespace sdg
