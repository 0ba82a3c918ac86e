#include "tests/testing/http_get.h"

#include <curl/curl.h>

#include <memory>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sdg::testing {
namespace {

size_t Append(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& url) {
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(),
                                                           &curl_easy_cleanup);
  std::string body;
  curl_easy_setopt(easy.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &body);
  CURLcode rc = curl_easy_perform(easy.get());
  if (rc != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat("GET ", url, ": ", curl_easy_strerror(rc)));
  }
  long code = 0;
  curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &code);
  if (code != 200) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": HTTP ", code));
  }
  return body;
}

absl::StatusOr<HttpReply> HttpRequest(const std::string& method,
                                      const std::string& url,
                                      const std::string& body,
                                      const std::vector<std::string>& headers,
                                      const std::string& ca_file) {
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(),
                                                           &curl_easy_cleanup);
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> list(
      nullptr, &curl_slist_free_all);
  for (const std::string& header : headers) {
    list.reset(curl_slist_append(list.release(), header.c_str()));
  }
  HttpReply reply;
  curl_easy_setopt(easy.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method == "POST") {
    curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(body.size()));
  }
  curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, list.get());
  if (!ca_file.empty()) {
    curl_easy_setopt(easy.get(), CURLOPT_CAINFO, ca_file.c_str());
  }
  curl_easy_setopt(easy.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT, 60L);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &reply.body);
  CURLcode rc = curl_easy_perform(easy.get());
  if (rc != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(method, " ", url, ": ", curl_easy_strerror(rc)));
  }
  curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

double MetricValue(const std::string& scrape,
                   const std::string& name_with_labels) {
  std::istringstream lines(scrape);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name_with_labels + " ", 0) == 0) {
      double value = -1;
      if (absl::SimpleAtod(line.substr(name_with_labels.size() + 1), &value)) {
        return value;
      }
    }
  }
  return -1;
}

}  // namespace sdg::testing
