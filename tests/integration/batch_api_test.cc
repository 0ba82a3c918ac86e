// The Batch API's HTTP port in-process (so that ThreadSanitizer sees its
// loop, the executor and the streamed downloads): over TLS with the gRPC
// port's certificate, a bearer token naming the tenant, an upload, a batch
// run to its end, its output downloaded, and a file large enough that its
// download waits for the socket.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/sha256.h"
#include "tests/integration/service_fixture.h"
#include "tests/testing/eventually.h"
#include "tests/testing/http_get.h"
#include "tests/testing/raw_http_client.h"
#include "tests/testing/test_certificates.h"

namespace sdg::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kBoundary[] = "sdg-test-boundary";

std::vector<json> JsonLinesOf(const std::string& text) {
  std::vector<json> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    lines.push_back(json::parse(line));
  }
  return lines;
}

std::string UploadForm(const std::string& lines) {
  return absl::StrCat(
      "--", kBoundary,
      "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n",
      "--", kBoundary,
      "\r\nContent-Disposition: form-data; name=\"file\"; "
      "filename=\"in.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n",
      lines, "\r\n--", kBoundary, "--\r\n");
}

class BatchApiServiceTest : public ServiceFixture {
 protected:
  void StartWithTls() { Start(/*tls=*/true); }
  void Start(bool tls, int64_t max_file_lines = 50000) {
    const std::string dir = MakeTempDir();
    WriteFile(dir + "/tokens",
              absl::StrCat("alice sha256:", Sha256Hex("alice-token"), "\n"));
    ServerOptions options;
    options.openai_listen = "127.0.0.1:0";
    options.auth.tokens_file = dir + "/tokens";
    options.batch.max_file_lines = max_file_lines;
    if (tls) {
      CertificateFiles ca;
      CertificateFiles server;
      ASSERT_TRUE(MakeCertificateAuthority(dir, "ca", ca).ok());
      ASSERT_TRUE(
          MakeSignedCertificate(dir, "server", ca, "IP:127.0.0.1", server)
              .ok());
      ca_file_ = ca.cert;
      options.tls.cert_file = server.cert;
      options.tls.key_file = server.key;
    }
    StartServer({{"sim", sim_.url()}}, options);
    base_ = absl::StrCat(tls ? "https" : "http",
                         "://127.0.0.1:", server_->openai_port(), "/v1");
  }

  HttpReply Call(const std::string& method, const std::string& path,
                 const std::string& body = "",
                 const std::string& content_type = "application/json") {
    absl::StatusOr<HttpReply> reply = HttpRequest(
        method, base_ + path, body,
        {"Authorization: Bearer alice-token", "Content-Type: " + content_type},
        ca_file_);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : HttpReply{};
  }
  json CallJson(const std::string& method, const std::string& path,
                const std::string& body = "") {
    HttpReply reply = Call(method, path, body);
    EXPECT_EQ(reply.status, 200) << reply.body;
    return json::parse(reply.body, nullptr, false);
  }
  json Upload(const std::string& lines) {
    HttpReply reply =
        Call("POST", "/files", UploadForm(lines),
             absl::StrCat("multipart/form-data; boundary=", kBoundary));
    EXPECT_EQ(reply.status, 200) << reply.body;
    return json::parse(reply.body, nullptr, false);
  }

  SimThread sim_;
  std::string ca_file_;
  std::string base_;
};

TEST_F(BatchApiServiceTest, ABatchRunsOverTlsAndItsOutputDownloads) {
  StartWithTls();
  std::string lines;
  for (int i = 0; i < 30; ++i) {
    absl::StrAppend(&lines, "{\"custom_id\": \"r", i,
                    "\", \"method\": \"POST\", \"url\": \"/v1/completions\", "
                    "\"body\": {\"model\": \"m\", \"prompt\": \"p",
                    i, "\"}}\n");
  }
  const json file = Upload(lines);
  ASSERT_TRUE(file.is_object());
  EXPECT_EQ(file["bytes"], lines.size());
  const json created =
      CallJson("POST", "/batches",
               json({{"input_file_id", file["id"]},
                     {"endpoint", "/v1/completions"},
                     {"completion_window", "24h"},
                     {"output_expires_after",
                      {{"anchor", "created_at"}, {"seconds", 7200}}}})
                   .dump());
  ASSERT_TRUE(created.is_object());
  const std::string id = created["id"];
  json batch;
  ASSERT_TRUE(Eventually([&] {
    batch = CallJson("GET", "/batches/" + id);
    return batch.value("status", "") == "completed";
  })) << batch.dump();
  EXPECT_EQ(batch["request_counts"]["completed"], 30);
  // Its output file expires 2 hours after it was written, not after the
  // retention (a week here).
  const json output_file =
      CallJson("GET", "/files/" + batch["output_file_id"].get<std::string>());
  EXPECT_EQ(output_file["purpose"], "batch_output");
  EXPECT_THAT(output_file["expires_at"].get<int64_t>() -
                  output_file["created_at"].get<int64_t>(),
              ::testing::AnyOf(7200, 7201));
  absl::StatusOr<std::string> scrape = HttpGet(
      absl::StrCat("http://127.0.0.1:", server_->metrics_port(), "/metrics"));
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_batches_total{state="completed"})"), 1);
  EXPECT_EQ(MetricValue(*scrape, R"(sdg_batches_total{state="expired"})"), 0);
  HttpReply output =
      Call("GET",
           "/files/" + batch["output_file_id"].get<std::string>() + "/content");
  EXPECT_EQ(output.status, 200);
  std::vector<json> out = JsonLinesOf(output.body);
  ASSERT_EQ(out.size(), 30u);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(out[i]["custom_id"], absl::StrCat("r", i));
    EXPECT_EQ(out[i]["response"]["body"]["choices"][0]["text"],
              absl::StrCat("sim(0): p", i));
  }
  // Without a token, or without TLS, nothing is served.
  absl::StatusOr<HttpReply> anonymous =
      HttpRequest("GET", base_ + "/batches", "", {}, ca_file_);
  ASSERT_TRUE(anonymous.ok()) << anonymous.status();
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_THAT(anonymous->body, HasSubstr("invalid_api_key"));
  // A plaintext request gets no HTTP reply from the TLS port.
  EXPECT_FALSE(HttpRequest("GET",
                           absl::StrCat("http://127.0.0.1:",
                                        server_->openai_port(), "/v1/batches"),
                           "", {"Authorization: Bearer alice-token"})
                   .ok());
}

TEST_F(BatchApiServiceTest, ALargeFileDownloadsWholeThroughTheStream) {
  StartWithTls();
  // About 12 MB: more than the stream queues (4 MiB), so the download waits
  // for the socket to drain, chunk after chunk.
  std::string lines;
  const std::string padding(400, 'x');
  for (int i = 0; i < 30000; ++i) {
    absl::StrAppend(&lines, "{\"custom_id\": \"r", i, "\", \"pad\": \"",
                    padding, "\"}\n");
  }
  const json file = Upload(lines);
  ASSERT_TRUE(file.is_object());
  HttpReply content =
      Call("GET", "/files/" + file["id"].get<std::string>() + "/content");
  EXPECT_EQ(content.status, 200);
  EXPECT_EQ(content.body.size(), lines.size());
  EXPECT_TRUE(content.body == lines);
  // And a listing shows it; a deleted file is gone.
  json listed = CallJson("GET", "/files?purpose=batch&limit=5");
  ASSERT_EQ(listed["data"].size(), 1u);
  EXPECT_EQ(listed["data"][0]["id"], file["id"]);
  EXPECT_EQ(
      CallJson("DELETE", "/files/" + file["id"].get<std::string>())["deleted"],
      true);
  EXPECT_EQ(Call("GET", "/files/" + file["id"].get<std::string>()).status, 404);
}

TEST_F(BatchApiServiceTest, AnUploadIsCheckedLineByLineWhileItArrives) {
  Start(/*tls=*/false, /*max_file_lines=*/100);
  // The request says 100 MB are coming; the client sends the form's head
  // and 101 lines, then waits. The answer comes now: the server has read
  // the lines as they came, and the 101st is one too many.
  RawClient client(server_->openai_port());
  client.Send(absl::StrCat(
      "POST /v1/files HTTP/1.1\r\nHost: sdg\r\n"
      "Authorization: Bearer alice-token\r\n"
      "Content-Type: multipart/form-data; boundary=b\r\n"
      "Content-Length: ",
      100 << 20,
      "\r\n\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; "
      "filename=\"big.jsonl\"\r\n\r\n"));
  std::string lines;
  for (int i = 0; i < 101; ++i) {
    absl::StrAppend(&lines, "{\"custom_id\": \"r", i, "\"}\n");
  }
  client.Send(lines);
  RawClient::Response response = client.Read();
  EXPECT_THAT(response.head, ::testing::StartsWith("HTTP/1.1 400 "));
  const json error = json::parse(response.body, nullptr, false);
  EXPECT_EQ(error["error"]["param"], "file") << response.body;
  EXPECT_THAT(error["error"]["message"].get<std::string>(),
              HasSubstr("more than 100 lines (the server's "
                        "--openai_max_file_lines)"));
  // Nothing of it was kept.
  EXPECT_EQ(CallJson("GET", "/files")["data"].size(), 0u);
}

}  // namespace
}  // namespace sdg::testing
