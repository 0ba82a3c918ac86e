// The OpenAI Batch API's HTTP glue: routes /v1/files and /v1/batches,
// authenticates the bearer token as the gRPC port does (the token names the
// tenant), decodes the requests into BatchService and encodes its answers
// as OpenAI's objects field for field (the openai-python and openai-node
// types), errors as {"error": {message, type, param, code}} with the HTTP
// status the SDKs raise their typed errors for. Runs on the executor
// (api_http_server.h): every call may block on the store.
#ifndef SDG_SERVER_API_BATCH_API_H_
#define SDG_SERVER_API_BATCH_API_H_

#include "absl/time/time.h"
#include "server/api/api_http_server.h"
#include "server/api/authenticator.h"
#include "server/service/batch_service.h"

namespace sdg {

class BatchApi {
 public:
  // `file_retention`: how long a file is kept (its expires_at).
  BatchApi(Authenticator& authenticator, BatchService& batches,
           absl::Duration file_retention)
      : authenticator_(authenticator),
        batches_(batches),
        file_retention_(file_retention) {}

  ApiResponse Handle(const ApiRequest& request);

 private:
  ApiResponse UploadFile(const Caller& caller, const ApiRequest& request);
  ApiResponse ListFiles(const Caller& caller, const ApiRequest& request);
  ApiResponse FileContent(const Caller& caller, const std::string& file_id);
  ApiResponse CreateBatch(const Caller& caller, const ApiRequest& request);
  ApiResponse ListBatches(const Caller& caller, const ApiRequest& request);

  Authenticator& authenticator_;
  BatchService& batches_;
  const absl::Duration file_retention_;
};

}  // namespace sdg

#endif  // SDG_SERVER_API_BATCH_API_H_
