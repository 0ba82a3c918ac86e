#include "server/http/url.h"

#include <gtest/gtest.h>

namespace sdg {
namespace {

TEST(RedactUrlPasswordTest, ThePasswordIsReplacedAndTheRestKept) {
  EXPECT_EQ(RedactUrlPassword("http://user:s3cret@host:8000/v1"),
            "http://user:[redacted]@host:8000/v1");
  EXPECT_EQ(RedactUrlPassword("https://u:p@ss:w@host/v1?x=@"),
            "https://u:[redacted]@host/v1?x=@");
}

TEST(RedactUrlPasswordTest, UrlsWithoutAPasswordAreUnchanged) {
  for (const char* url :
       {"http://host:8000/v1", "http://user@host/v1", "http://host/a@b:c",
        "not a url", "http://host/v1?user:pass@x"}) {
    EXPECT_EQ(RedactUrlPassword(url), url);
  }
}

}  // namespace
}  // namespace sdg
