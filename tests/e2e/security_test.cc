// TLS, mTLS, tokens and tenants end to end: sdgd and llmsim as processes,
// certificates made with openssl for each test, and sdgctl or a plain gRPC
// client as the caller.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/sha256.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "sdg/v1/generation.grpc.pb.h"
#include "tests/e2e/stack_test.h"
#include "tests/testing/eventually.h"
#include "tests/testing/http_get.h"
#include "tests/testing/test_certificates.h"

namespace sdg::testing {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

class SecurityTest : public StackTest {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }

  // The CA "ca", a server certificate for sdgd.test (and not 127.0.0.1:
  // clients name the server with --tls_server_name), a client one.
  void MakeCertificates() {
    absl::Status made = MakeCertificateAuthority(dir_, "ca", ca_);
    ASSERT_TRUE(made.ok()) << made;
    made = MakeSignedCertificate(dir_, "server", ca_, "DNS:sdgd.test", server_);
    ASSERT_TRUE(made.ok()) << made;
    made =
        MakeSignedCertificate(dir_, "client", ca_, "DNS:client.test", client_);
    ASSERT_TRUE(made.ok()) << made;
  }

  std::vector<std::string> TlsServerArgs() const {
    return {"--tls_cert=" + server_.cert, "--tls_key=" + server_.key};
  }
  std::vector<std::string> TlsClientArgs() const {
    return {"--tls_ca=" + ca_.cert, "--tls_server_name=sdgd.test"};
  }

  // Tokens file lines for `tenants`, whose token is TENANT-token.
  std::string TokensFile(const std::vector<std::string>& tenants) {
    std::string text = "# tenant sha256 of its token\n";
    for (const std::string& tenant : tenants) {
      text += tenant + " sha256:" + Sha256Hex(tenant + "-token") + "\n";
    }
    return text;
  }
  // Writes it the way a Secret update does: a new file renamed over.
  std::string WriteTokensFile(const std::vector<std::string>& tenants) {
    const std::string path = dir_ + "/tokens";
    WriteFile(path + ".next", TokensFile(tenants));
    EXPECT_EQ(::rename((path + ".next").c_str(), path.c_str()), 0);
    return path;
  }
  // A file holding `tenant`'s token, for sdgctl's --token_file.
  std::string TokenFileOf(const std::string& tenant) {
    const std::string path = dir_ + "/" + tenant + ".token";
    WriteFile(path, tenant + "-token\n");
    return path;
  }
  CommandResult SdgctlAs(const std::string& tenant,
                         std::vector<std::string> args) {
    args.push_back("--token_file=" + TokenFileOf(tenant));
    return stack_->Sdgctl(args);
  }

  // A plain gRPC client, plaintext, calling as `tenant` ("" sends no token).
  std::unique_ptr<v1::GenerationService::Stub> Stub() {
    return v1::GenerationService::NewStub(grpc::CreateChannel(
        stack_->address(), grpc::InsecureChannelCredentials()));
  }
  // A plain gRPC client over TLS, trusting the CA in `ca_file`, expecting
  // the server's certificate to name sdgd.test.
  std::unique_ptr<v1::GenerationService::Stub> TlsStub(
      const std::string& ca_file) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(ca_file);
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("sdgd.test");
    return v1::GenerationService::NewStub(grpc::CreateCustomChannel(
        stack_->address(), grpc::SslCredentials(ssl), args));
  }
  static void As(grpc::ClientContext& context, const std::string& tenant) {
    if (!tenant.empty()) {
      context.AddMetadata("authorization", "Bearer " + tenant + "-token");
    }
  }
  grpc::Status GetJob(const std::string& tenant, const std::string& job_id,
                      v1::Job* job = nullptr) {
    grpc::ClientContext context;
    As(context, tenant);
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    v1::Job response;
    grpc::Status status = Stub()->GetJob(&context, request, &response);
    if (job != nullptr) *job = response;
    return status;
  }
  std::vector<std::string> ListJobIds(const std::string& tenant) {
    grpc::ClientContext context;
    As(context, tenant);
    v1::ListJobsResponse response;
    EXPECT_TRUE(Stub()->ListJobs(&context, {}, &response).ok());
    std::vector<std::string> ids;
    for (const v1::Job& job : response.jobs()) ids.push_back(job.job_id());
    return ids;
  }
  // CreateJob for a job that waits on the slow backend.
  grpc::Status CreateJob(const std::string& tenant, const std::string& job_id,
                         const std::string& dataset_id = "") {
    grpc::ClientContext context;
    As(context, tenant);
    v1::GenerateJobRequest request;
    request.set_job_id(job_id);
    request.mutable_block()->set_model("m");
    request.mutable_block()->set_prompt_template("Say {{x}}");
    if (dataset_id.empty()) {
      (*request.add_rows()->mutable_fields())["x"].set_string_value("hi");
    } else {
      request.set_dataset_id(dataset_id);
    }
    v1::Job job;
    return Stub()->CreateJob(&context, request, &job);
  }
  std::string Input() {
    const std::string path = dir_ + "/in.jsonl";
    WriteFile(path, "{\"q\":\"one\"}\n{\"q\":\"two\"}\n{\"q\":\"three\"}\n");
    return path;
  }

  std::string dir_;
  CertificateFiles ca_, server_, client_;
};

TEST_F(SecurityTest, TlsServesSdgctlAndAPlainGrpcClient) {
  MakeCertificates();
  StackOptions options;
  options.sdgd_args = TlsServerArgs();
  Start(options);
  const std::string out = dir_ + "/out.jsonl";
  std::vector<std::string> generate = {
      "generate",  "--input=" + Input(),   "--output=" + out,
      "--model=m", "--template=Say {{q}}", "--job_id=tls"};
  for (const std::string& arg : TlsClientArgs()) generate.push_back(arg);
  CommandResult result = stack_->Sdgctl(generate);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(JsonLines(ReadFile(out)).size(), 3u);

  // Any gRPC client with the CA: no sdgctl needed.
  auto stub = TlsStub(ca_.cert);
  grpc::ClientContext context;
  v1::GetJobRequest request;
  request.set_job_id("tls");
  v1::Job job;
  grpc::Status status = stub->GetJob(&context, request, &job);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.rows_succeeded(), 3);

  // Plaintext gets no answer, and neither does TLS that does not trust the
  // CA (the system's roots) or names another host.
  grpc::ClientContext plain;
  plain.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
  EXPECT_EQ(Stub()->GetJob(&plain, request, &job).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  result = stack_->Sdgctl({"get", "tls", "--tls", "--reconnect_for=0s"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("UNAVAILABLE"));
  result = stack_->Sdgctl({"get", "tls", "--tls_ca=" + ca_.cert});
  EXPECT_NE(result.exit_code, 0);  // 127.0.0.1 is not in the certificate
}

TEST_F(SecurityTest, MutualTlsRefusesNoCertificateAndAnotherCasOne) {
  MakeCertificates();
  CertificateFiles other_ca, stranger;
  ASSERT_TRUE(MakeCertificateAuthority(dir_, "other-ca", other_ca).ok());
  ASSERT_TRUE(MakeSignedCertificate(dir_, "stranger", other_ca,
                                    "DNS:client.test", stranger)
                  .ok());
  StackOptions options;
  options.sdgd_args = TlsServerArgs();
  options.sdgd_args.push_back("--tls_client_ca=" + ca_.cert);
  Start(options);

  // `sdgctl jobs` presenting `certificate` (none when null).
  auto jobs_with = [&](const CertificateFiles* certificate) {
    std::vector<std::string> args = {"jobs"};
    for (const std::string& arg : TlsClientArgs()) args.push_back(arg);
    if (certificate != nullptr) {
      args.push_back("--tls_cert=" + certificate->cert);
      args.push_back("--tls_key=" + certificate->key);
    }
    return stack_->Sdgctl(args);
  };
  for (const CertificateFiles* refused :
       {static_cast<CertificateFiles*>(nullptr), &stranger}) {
    CommandResult result = jobs_with(refused);
    EXPECT_NE(result.exit_code, 0);
    EXPECT_THAT(result.err, HasSubstr("UNAVAILABLE"));
  }
  CommandResult admitted = jobs_with(&client_);
  EXPECT_EQ(admitted.exit_code, 0) << admitted.err;
}

TEST_F(SecurityTest, ARenewedCertificateIsServedWithoutARestart) {
  MakeCertificates();
  StackOptions options;
  options.sdgd_args = TlsServerArgs();
  options.sdgd_args.push_back("--tls_refresh_interval=1s");
  Start(options);
  // cert-manager renews: a new key and certificate, from a new CA here so
  // that a client can tell which one it was served.
  CertificateFiles next_ca, next;
  ASSERT_TRUE(MakeCertificateAuthority(dir_, "next-ca", next_ca).ok());
  ASSERT_TRUE(
      MakeSignedCertificate(dir_, "next", next_ca, "DNS:sdgd.test", next).ok());
  ASSERT_EQ(::rename(next.key.c_str(), server_.key.c_str()), 0);
  ASSERT_EQ(::rename(next.cert.c_str(), server_.cert.c_str()), 0);

  auto trusts_only_next_ca = [&] {
    auto stub = TlsStub(next_ca.cert);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::ListJobsResponse response;
    return stub->ListJobs(&context, {}, &response).ok();
  };
  // sdgd checks the files every second; the same process serves the new
  // certificate once it has (the port would refuse a restarted one: the
  // Stack does not restart it).
  EXPECT_TRUE(Eventually(trusts_only_next_ca));
}

TEST_F(SecurityTest, TokensAreRequiredAndAChangedFileCountsWithoutARestart) {
  StackOptions options;
  options.sdgd_args = {"--auth_tokens_file=" + WriteTokensFile({"alice"})};
  Start(options);
  CommandResult anonymous = stack_->Sdgctl({"jobs"});
  EXPECT_EQ(anonymous.exit_code, 1);
  EXPECT_THAT(anonymous.err, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(anonymous.err, HasSubstr("--token_file or SDG_TOKEN"));
  EXPECT_EQ(SdgctlAs("alice", {"jobs"}).exit_code, 0);
  CommandResult stranger = SdgctlAs("mallory", {"jobs"});
  EXPECT_EQ(stranger.exit_code, 1);
  EXPECT_THAT(stranger.err, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(stranger.err, Not(HasSubstr("mallory-token")));

  // The operator adds bob and revokes alice; the running sdgd follows.
  WriteTokensFile({"bob"});
  EXPECT_EQ(SdgctlAs("bob", {"jobs"}).exit_code, 0);
  CommandResult revoked = SdgctlAs("alice", {"jobs"});
  EXPECT_EQ(revoked.exit_code, 1);
  EXPECT_THAT(revoked.err, HasSubstr("UNAUTHENTICATED"));

  std::string log = stack_->SdgdLog();
  EXPECT_THAT(log, HasSubstr("auth tokens file reloaded"));
  for (const char* token : {"alice-token", "bob-token", "mallory-token"}) {
    EXPECT_THAT(log, Not(HasSubstr(token)));
  }
}

// The token metrics carry the tenant of the job whose replies they count
// (tenants are the tokens file's: a bounded set, as sdg_jobs_total's).
TEST_F(SecurityTest, EachTenantsTokensAreCountedUnderItsName) {
  StackOptions options;
  options.sdgd_args = {"--auth_tokens_file=" +
                       WriteTokensFile({"alice", "bob"})};
  Start(options);
  // Three rows "one", "two", "three": alice's prompts "Q: one" are 2
  // tokens and their echoes "sim(0): Q: one" 3; bob's a token longer.
  for (const auto& [tenant, job_template] :
       {std::pair{"alice", "Q: {{q}}"}, std::pair{"bob", "Say {{q}} now"}}) {
    CommandResult result = SdgctlAs(
        tenant, {"generate", "--input=" + Input(),
                 "--output=" + dir_ + "/" + tenant + ".jsonl", "--model=m",
                 std::string("--template=") + job_template});
    ASSERT_EQ(result.exit_code, 0) << result.err;
  }
  absl::StatusOr<std::string> scrape = HttpGet(stack_->metrics_url());
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(
      MetricValue(*scrape,
                  R"(sdg_prompt_tokens_total{backend="sim",tenant="alice"})"),
      6);
  EXPECT_EQ(MetricValue(
                *scrape,
                R"(sdg_generation_tokens_total{backend="sim",tenant="alice"})"),
            9);
  EXPECT_EQ(
      MetricValue(*scrape,
                  R"(sdg_prompt_tokens_total{backend="sim",tenant="bob"})"),
      9);
  EXPECT_EQ(
      MetricValue(*scrape,
                  R"(sdg_generation_tokens_total{backend="sim",tenant="bob"})"),
      12);
}

TEST_F(SecurityTest, ATenantSeesOnlyItsJobsAndTheAdminSeesAll) {
  StackOptions options;
  options.llmsim_args = {"--latency_ms=600000"};  // jobs stay running
  options.sdgd_args = {"--auth_tokens_file=" +
                       WriteTokensFile({"alice", "bob", "admin"})};
  Start(options);
  ASSERT_TRUE(CreateJob("alice", "alices-job").ok());

  // To bob, alice's job is as absent as a job nobody made, word for word.
  grpc::Status hidden = GetJob("bob", "alices-job");
  grpc::Status absent = GetJob("bob", "no-such-job");
  EXPECT_EQ(hidden.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(hidden.error_message(),
            absl::StrReplaceAll(absent.error_message(),
                                {{"no-such-job", "alices-job"}}));
  for (const char* command : {"watch", "cancel", "delete"}) {
    CommandResult result = SdgctlAs("bob", {command, "alices-job"});
    EXPECT_EQ(result.exit_code, 1) << command;
    EXPECT_THAT(result.err, HasSubstr("NOT_FOUND")) << command;
  }
  EXPECT_THAT(ListJobIds("bob"), ::testing::IsEmpty());
  // Nor can bob take the id, or attach to the job by sending its request.
  grpc::Status taken = CreateJob("bob", "alices-job");
  EXPECT_EQ(taken.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(ListJobIds("alice"), ::testing::ElementsAre("alices-job"));

  // The admin lists it with its tenant, and cancels it.
  v1::Job job;
  ASSERT_TRUE(GetJob("admin", "alices-job", &job).ok());
  EXPECT_EQ(job.tenant(), "alice");
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(ListJobIds("admin"), ::testing::ElementsAre("alices-job"));
  CommandResult listed = SdgctlAs("admin", {"jobs"});
  EXPECT_THAT(listed.out,
              ::testing::ContainsRegex("alices-job +RUNNING +alice "));
  CommandResult cancelled = SdgctlAs("admin", {"cancel", "alices-job"});
  EXPECT_EQ(cancelled.exit_code, 0) << cancelled.err;
  CommandResult watched = SdgctlAs("alice", {"watch", "alices-job"});
  EXPECT_THAT(watched.out + watched.err, HasSubstr("cancelled by CancelJob"));
}

TEST_F(SecurityTest, AnUploadIsItsTenantsOnly) {
  StackOptions options;
  options.sdgd_args = {"--auth_tokens_file=" +
                       WriteTokensFile({"alice", "bob"})};
  Start(options);
  grpc::ClientContext context;
  As(context, "alice");
  v1::Dataset dataset;
  auto writer = Stub()->UploadDataset(&context, &dataset);
  v1::DatasetChunk chunk;
  chunk.set_dataset_id("alices-rows");
  chunk.set_data("{\"x\":\"a\"}\n");
  ASSERT_TRUE(writer->Write(chunk));
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());

  grpc::Status refused = CreateJob("bob", "bobs-job", "alices-rows");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(refused.error_message(),
            "dataset_id: no dataset \"alices-rows\"; upload it first");
  EXPECT_TRUE(CreateJob("alice", "alices-job", "alices-rows").ok());
}

TEST_F(SecurityTest, ATenantsQuotaIsExhaustedNamingTheTenant) {
  StackOptions options;
  options.llmsim_args = {"--latency_ms=600000"};
  options.sdgd_args = {
      "--auth_tokens_file=" + WriteTokensFile({"alice", "bob"}),
      "--tenant_max_jobs=1", "--tenant_max_queued_jobs=1"};
  Start(options);
  ASSERT_TRUE(CreateJob("alice", "a1").ok());
  ASSERT_TRUE(CreateJob("alice", "a2").ok());
  grpc::Status exhausted = CreateJob("alice", "a3");
  EXPECT_EQ(exhausted.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(exhausted.error_message(),
              HasSubstr("tenant \"alice\" is at its limit of 1 running and 1 "
                        "queued jobs (--tenant_max_jobs, "
                        "--tenant_max_queued_jobs)"));
  // Bob's job runs at once: the server has run slots alice may not use.
  ASSERT_TRUE(CreateJob("bob", "b1").ok());
  v1::Job a2, b1;
  ASSERT_TRUE(GetJob("alice", "a2", &a2).ok());
  ASSERT_TRUE(GetJob("bob", "b1", &b1).ok());
  EXPECT_EQ(a2.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(b1.state(), v1::JOB_STATE_RUNNING);
}

// A GenerateJob on `dataset_path` as `tenant`: its status and the first
// result row's "q" column (empty if none).
struct PathRun {
  grpc::Status status;
  std::string first_q;
};

class TenantDiskTest : public SecurityTest {
 protected:
  // --data_root holding alice/ and bob/, a shared/ folder, and in bob/ a
  // symlink into alice/.
  void MakeDataRoot() {
    data_root_ = dir_ + "/data";
    for (const char* folder : {"", "/alice", "/bob", "/shared"}) {
      ASSERT_EQ(::mkdir((data_root_ + folder).c_str(), 0755), 0);
    }
    WriteFile(data_root_ + "/alice/secret.jsonl",
              "{\"q\":\"alice secret 42\"}\n");
    WriteFile(data_root_ + "/bob/own.jsonl", "{\"q\":\"bob row\"}\n");
    WriteFile(data_root_ + "/shared/common.jsonl", "{\"q\":\"common row\"}\n");
    ASSERT_EQ(::symlink((data_root_ + "/alice/secret.jsonl").c_str(),
                        (data_root_ + "/bob/link.jsonl").c_str()),
              0);
  }

  PathRun RunOnPath(const std::string& tenant, const std::string& path) {
    grpc::ClientContext context;
    As(context, tenant);
    v1::GenerateJobRequest request;
    request.mutable_block()->set_model("m");
    request.mutable_block()->set_prompt_template("Say {{q}}");
    request.set_dataset_path(path);
    auto stub = Stub();
    auto reader = stub->GenerateJob(&context, request);
    PathRun run;
    v1::JobEvent event;
    while (reader->Read(&event)) {
      for (const v1::ResultRow& row : event.shard_result().rows()) {
        if (run.first_q.empty()) {
          run.first_q = row.columns().fields().at("q").string_value();
        }
      }
    }
    run.status = reader->Finish();
    return run;
  }

  // Uploads `bytes` of JSON lines (of about 1 KiB each) as `tenant`; the
  // call's status, and the bytes written before the server ended it.
  std::pair<grpc::Status, int64_t> Upload(const std::string& tenant,
                                          const std::string& dataset_id,
                                          int64_t bytes) {
    grpc::ClientContext context;
    As(context, tenant);
    v1::Dataset dataset;
    auto writer = Stub()->UploadDataset(&context, &dataset);
    const std::string line = json{{"x", std::string(1000, 'x')}}.dump() + "\n";
    int64_t sent = 0;
    bool first = true;
    while (sent < bytes) {
      v1::DatasetChunk chunk;
      if (first) chunk.set_dataset_id(dataset_id);
      first = false;
      std::string data;
      while (data.size() < 64 * 1024 &&
             sent + static_cast<int64_t>(data.size()) < bytes) {
        data += line;
      }
      chunk.set_data(data);
      if (!writer->Write(chunk)) break;
      sent += static_cast<int64_t>(data.size());
    }
    writer->WritesDone();
    return {writer->Finish(), sent};
  }

  // The files under `root`, as relative paths, sorted.
  static std::vector<std::string> FilesUnder(const std::string& root) {
    CommandResult listing = RunCommand({"find", root, "-mindepth", "1"});
    std::vector<std::string> files =
        absl::StrSplit(absl::StrReplaceAll(listing.out, {{root + "/", ""}}),
                       '\n', absl::SkipEmpty());
    std::sort(files.begin(), files.end());
    return files;
  }

  std::string data_root_;
};

TEST_F(TenantDiskTest, ATenantReadsOnlyItsOwnFolderAndTheSharedOne) {
  MakeDataRoot();
  StackOptions options;
  options.sdgd_args = {
      "--auth_tokens_file=" + WriteTokensFile({"alice", "bob", "admin"}),
      "--data_root=" + data_root_, "--data_root_shared=shared"};
  Start(options);
  const std::vector<std::string> files_before = FilesUnder(data_root_);

  PathRun own = RunOnPath("alice", "secret.jsonl");
  ASSERT_TRUE(own.status.ok()) << own.status.error_message();
  EXPECT_EQ(own.first_q, "alice secret 42");
  EXPECT_EQ(RunOnPath("bob", "own.jsonl").first_q, "bob row");
  const int64_t requests_before =
      json::parse(stack_->LlmsimStats())["requests"];

  // Bob reaching for alice's file, four ways: each is a file he does not
  // have, in the words of one.
  for (const std::string& path :
       {std::string("alice/secret.jsonl"), std::string("../alice/secret.jsonl"),
        std::string("link.jsonl"), data_root_ + "/alice/secret.jsonl",
        std::string("missing.jsonl")}) {
    PathRun refused = RunOnPath("bob", path);
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::NOT_FOUND) << path;
    EXPECT_EQ(refused.status.error_message(),
              "dataset_path: no file \"" + path +
                  "\" in your folder of --data_root (bob/) nor in the shared "
                  "folder (shared/)")
        << path;
    EXPECT_EQ(refused.first_q, "");
  }
  EXPECT_EQ(json::parse(stack_->LlmsimStats())["requests"], requests_before)
      << "llmsim served nothing for the refused paths";

  // The admin names any path under --data_root.
  EXPECT_EQ(RunOnPath("admin", "alice/secret.jsonl").first_q,
            "alice secret 42");
  EXPECT_EQ(RunOnPath("admin", "bob/own.jsonl").first_q, "bob row");
  // The shared folder is both tenants'; sdgd writes nothing under
  // --data_root (it copies what it reads into its own store).
  EXPECT_EQ(RunOnPath("alice", "shared/common.jsonl").first_q, "common row");
  EXPECT_EQ(RunOnPath("bob", "shared/common.jsonl").first_q, "common row");
  EXPECT_EQ(FilesUnder(data_root_), files_before);
}

TEST_F(TenantDiskTest, AnUploadPastTheLimitIsRefusedWhileItStreams) {
  StackOptions options;
  options.sdgd_args = {"--auth_tokens_file=" + WriteTokensFile({"alice"}),
                       "--max_upload_mib=1"};
  Start(options);
  const int64_t offered = 64 << 20;
  auto [status, sent] = Upload("alice", "too-big", offered);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(),
            "the upload is larger than 1.0 MiB, the server's "
            "--max_upload_mib; split the dataset into several uploads and "
            "jobs");
  EXPECT_LT(sent, offered) << "refused while it streamed, not at its end";
  // Nothing is kept: no upload folder, and no upload by that id.
  EXPECT_EQ(FilesUnder(stack_->state_dir() + "/uploads"),
            std::vector<std::string>{});
  EXPECT_EQ(CreateJob("alice", "on-too-big", "too-big").error_code(),
            grpc::StatusCode::NOT_FOUND);
  auto [small, small_sent] = Upload("alice", "small", 100 << 10);
  EXPECT_TRUE(small.ok()) << small.error_message();
}

TEST_F(TenantDiskTest, ATenantPastItsQuotaIsRefusedWhileAnotherGoesOn) {
  StackOptions options;
  options.sdgd_args = {
      "--auth_tokens_file=" + WriteTokensFile({"alice", "bob"}),
      "--tenant_storage_quota_mib=1"};
  Start(options);
  auto [first, first_sent] = Upload("alice", "alice-1", 600 << 10);
  ASSERT_TRUE(first.ok()) << first.error_message();
  // A second upload would take alice past 1 MiB: refused as it arrives.
  auto [second, second_sent] = Upload("alice", "alice-2", 600 << 10);
  EXPECT_EQ(second.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(second.error_message(), HasSubstr("tenant \"alice\" holds "));
  EXPECT_THAT(second.error_message(),
              HasSubstr(" of its 1.0 MiB storage quota "
                        "(--tenant_storage_quota_mib)"));
  // A job whose inline rows take alice past her quota is admitted (she was
  // under it); the next is refused, naming what she holds.
  {
    grpc::ClientContext context;
    As(context, "alice");
    v1::GenerateJobRequest request;
    request.set_job_id("alice-big");
    request.mutable_block()->set_model("m");
    request.mutable_block()->set_prompt_template("Say {{x}}");
    for (int i = 0; i < 600; ++i) {
      (*request.add_rows()->mutable_fields())["x"].set_string_value(
          std::string(1000, 'y'));
    }
    v1::Job job;
    ASSERT_TRUE(Stub()->CreateJob(&context, request, &job).ok());
  }
  grpc::Status refused = CreateJob("alice", "alice-next");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("storage quota (--tenant_storage_quota_mib)"));
  EXPECT_THAT(refused.error_message(), HasSubstr(" of uploads, "));

  // Bob still uploads and runs.
  auto [bobs, bobs_sent] = Upload("bob", "bob-1", 300 << 10);
  ASSERT_TRUE(bobs.ok()) << bobs.error_message();
  EXPECT_TRUE(CreateJob("bob", "bob-job", "bob-1").ok());

  // sdgctl shows each tenant its own usage.
  CommandResult alice_usage = SdgctlAs("alice", {"usage"});
  ASSERT_EQ(alice_usage.exit_code, 0) << alice_usage.err;
  EXPECT_THAT(alice_usage.out, HasSubstr("tenant alice: "));
  EXPECT_THAT(alice_usage.out, HasSubstr(" of 1.0 MiB ("));
  CommandResult bob_usage = SdgctlAs("bob", {"usage"});
  EXPECT_THAT(bob_usage.out, HasSubstr("tenant bob: "));
}

// Probes and grpcurl's list need no token; --reflection=false closes the
// latter.
grpc::StatusCode ListServices(const std::string& address) {
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  stream->Write(request);
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  while (stream->Read(&response)) {
  }
  return stream->Finish().error_code();
}

grpc::StatusCode CheckHealth(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&context, request, &response).error_code();
}

TEST_F(SecurityTest, HealthAndReflectionNeedNoTokenAndReflectionCanBeOff) {
  StackOptions options;
  options.sdgd_args = {"--auth_tokens_file=" + WriteTokensFile({"alice"})};
  Start(options);
  EXPECT_EQ(CheckHealth(stack_->address()), grpc::StatusCode::OK);
  EXPECT_EQ(ListServices(stack_->address()), grpc::StatusCode::OK);

  options.sdgd_args.push_back("--reflection=false");
  Start(options);
  EXPECT_EQ(CheckHealth(stack_->address()), grpc::StatusCode::OK);
  EXPECT_EQ(ListServices(stack_->address()), grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace sdg::testing
