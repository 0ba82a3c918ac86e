// Sends one CreateJob whose dataset is inline `rows` (what a grpcurl or SDK
// user sends), for the memory benchmark: sdgctl always uploads instead.
//   inline_job ADDRESS INPUT.jsonl JOB_ID BACKEND
// Prints the request's size in bytes.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <iostream>
#include <string>

#include "google/protobuf/util/json_util.h"
#include "sdg/v1/generation.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: inline_job ADDRESS INPUT.jsonl JOB_ID BACKEND\n";
    return 2;
  }
  sdg::v1::GenerateJobRequest request;
  request.set_job_id(argv[3]);
  request.mutable_block()->set_backend(argv[4]);
  request.mutable_block()->set_model("m");
  request.mutable_block()->set_prompt_template("Answer briefly. {{question}}");
  request.set_batch_size(8);
  request.set_num_workers(32);
  std::ifstream input(argv[2]);
  for (std::string line; std::getline(input, line);) {
    if (!google::protobuf::util::JsonStringToMessage(line, request.add_rows())
             .ok()) {
      std::cerr << "not a JSON object: " << line << "\n";
      return 2;
    }
  }
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto stub = sdg::v1::GenerationService::NewStub(grpc::CreateCustomChannel(
      argv[1], grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext context;
  sdg::v1::Job job;
  grpc::Status status = stub->CreateJob(&context, request, &job);
  if (!status.ok()) {
    std::cerr << "CreateJob: " << status.error_message() << "\n";
    return 1;
  }
  std::cout << request.ByteSizeLong() << "\n";
  return 0;
}
