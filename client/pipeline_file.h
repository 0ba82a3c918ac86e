// Reads an InstructLab SDG pipeline file (version "1.0", `blocks:`) and the
// prompt config files its LLM blocks name (config_path, relative to the
// pipeline file, as InstructLab resolves it) into the API's Pipeline. The
// file is checked against the rules of InstructLab's v1 schema before
// anything is sent: an unknown block type, a missing config file or a bad
// key is an error naming the file, the block and the key.
#ifndef SDG_CLIENT_PIPELINE_FILE_H_
#define SDG_CLIENT_PIPELINE_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdg/v1/generation.pb.h"

namespace sdg {

struct PipelineFileOptions {
  // Every LLM block's backend and model unless its gen_kwargs name a model
  // (InstructLab's --model).
  std::string backend;
  std::string model;
  v1::Api api = v1::API_COMPLETIONS;
};

struct PipelineFile {
  v1::Pipeline pipeline;
  // Parts of the format sdgd does not run, where leaving them out changes
  // nothing the pipeline generates (`datamixing`).
  std::vector<std::string> warnings;
};

// INVALID_ARGUMENT or NOT_FOUND with `FILE: block N (NAME): KEY: reason`.
absl::StatusOr<PipelineFile> LoadPipelineFile(
    const std::string& path, const PipelineFileOptions& options);

}  // namespace sdg

#endif  // SDG_CLIENT_PIPELINE_FILE_H_
