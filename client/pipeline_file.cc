#include "client/pipeline_file.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"

namespace sdg {
namespace {

// InstructLab's defaults for an LLMBlock's generation (llmblock.py).
constexpr int kDefaultMaxTokens = 4096;
constexpr double kDefaultTemperature = 0;

// Where a problem is: "FILE: block N (NAME)", then the key.
class Place {
 public:
  explicit Place(std::string file) : text_(std::move(file)) {}
  Place Block(size_t index, const std::string& name) const {
    return Place(
        absl::StrCat(text_, ": block ", index,
                     name.empty() ? "" : absl::StrCat(" (", name, ")")));
  }
  Place Key(absl::string_view key) const {
    return Place(absl::StrCat(text_, ": ", key));
  }
  absl::Status Error(absl::string_view reason) const {
    return absl::InvalidArgumentError(absl::StrCat(text_, ": ", reason));
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

absl::Status CheckKeys(const YAML::Node& map, const Place& place,
                       std::initializer_list<absl::string_view> known) {
  if (!map.IsMap()) return place.Error("must be a mapping");
  for (const auto& entry : map) {
    const std::string key = entry.first.Scalar();
    bool found = false;
    for (absl::string_view k : known) found = found || key == k;
    if (!found) {
      return place.Error(absl::StrCat("unknown key \"", key, "\" (known: ",
                                      absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> String(const YAML::Node& node, const Place& place) {
  if (!node.IsScalar()) return place.Error("must be a string");
  return node.Scalar();
}

absl::StatusOr<std::string> RequiredString(const YAML::Node& map,
                                           absl::string_view key,
                                           const Place& place) {
  const YAML::Node node = map[std::string(key)];
  if (!node) return place.Error(absl::StrCat("needs \"", key, "\""));
  return String(node, place.Key(key));
}

absl::StatusOr<std::vector<std::string>> StringList(const YAML::Node& node,
                                                    const Place& place) {
  std::vector<std::string> list;
  if (!node) return list;
  if (!node.IsSequence()) return place.Error("must be a list of strings");
  for (const YAML::Node& item : node) {
    if (!item.IsScalar()) return place.Error("must be a list of strings");
    list.push_back(item.Scalar());
  }
  return list;
}

absl::Status AppendStrings(
    const YAML::Node& node, const Place& place,
    google::protobuf::RepeatedPtrField<std::string>* out) {
  absl::StatusOr<std::vector<std::string>> list = StringList(node, place);
  if (!list.ok()) return list.status();
  for (std::string& item : *list) *out->Add() = std::move(item);
  return absl::OkStatus();
}

// A plain scalar as PyYAML's safe_load reads it: null, a YAML 1.1 bool
// (yes/no/on/off too), a number, else a string. A quoted scalar is a string.
google::protobuf::Value ScalarValue(const YAML::Node& node) {
  google::protobuf::Value value;
  const std::string& text = node.Scalar();
  if (node.Tag() != "?") {
    value.set_string_value(text);
    return value;
  }
  static const std::set<std::string> kTrue = {
      "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const std::set<std::string> kFalse = {
      "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  if (text.empty() || text == "~" || text == "null" || text == "Null" ||
      text == "NULL") {
    value.set_null_value(google::protobuf::NULL_VALUE);
  } else if (kTrue.contains(text)) {
    value.set_bool_value(true);
  } else if (kFalse.contains(text)) {
    value.set_bool_value(false);
  } else {
    errno = 0;
    char* end = nullptr;
    const double number = std::strtod(text.c_str(), &end);
    const bool numeric =
        errno == 0 && end == text.c_str() + text.size() &&
        (absl::ascii_isdigit(text.back()) || text.back() == '.');
    if (numeric) {
      value.set_number_value(number);
    } else {
      value.set_string_value(text);
    }
  }
  return value;
}

absl::StatusOr<double> Number(const YAML::Node& node, const Place& place) {
  if (node.IsScalar()) {
    google::protobuf::Value value = ScalarValue(node);
    if (value.has_number_value()) return value.number_value();
  }
  return place.Error("must be a number");
}

// A block's gen_kwargs onto its Block (model, max_tokens, temperature, n,
// top_p, seed, stop); `n: scaled` sets scaled_n.
absl::Status ApplyGenKwargs(const YAML::Node& kwargs, const Place& place,
                            v1::LlmStep& step) {
  if (!kwargs) return absl::OkStatus();
  if (absl::Status s = CheckKeys(
          kwargs, place,
          {"model", "max_tokens", "temperature", "n", "top_p", "seed", "stop"});
      !s.ok()) {
    return s;
  }
  v1::Block& block = *step.mutable_block();
  if (const YAML::Node model = kwargs["model"]) {
    absl::StatusOr<std::string> text = String(model, place.Key("model"));
    if (!text.ok()) return text.status();
    block.set_model(*text);
  }
  if (const YAML::Node n = kwargs["n"]) {
    if (n.IsScalar() && n.Scalar() == "scaled") {
      step.set_scaled_n(true);
    } else {
      absl::StatusOr<double> count = Number(n, place.Key("n"));
      if (!count.ok())
        return place.Key("n").Error("must be a number or \"scaled\"");
      block.set_n(static_cast<int32_t>(*count));
    }
  }
  for (const char* key : {"max_tokens", "temperature", "top_p", "seed"}) {
    const YAML::Node node = kwargs[key];
    if (!node) continue;
    absl::StatusOr<double> number = Number(node, place.Key(key));
    if (!number.ok()) return number.status();
    const absl::string_view name = key;
    if (name == "max_tokens")
      block.set_max_tokens(static_cast<int32_t>(*number));
    if (name == "temperature") block.set_temperature(*number);
    if (name == "top_p") block.set_top_p(*number);
    if (name == "seed") block.set_seed(static_cast<int64_t>(*number));
  }
  if (const YAML::Node stop = kwargs["stop"]) {
    block.clear_stop();
    if (stop.IsScalar()) {
      block.add_stop(stop.Scalar());
    } else if (absl::Status s =
                   AppendStrings(stop, place.Key("stop"), block.mutable_stop());
               !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<YAML::Node> LoadYaml(const std::string& path) {
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not valid YAML: ", e.what()));
  }
}

// InstructLab's prompt templates are Jinja; sdgd's have {{column}} only.
absl::Status CheckTemplateText(const std::string& text, const Place& place) {
  for (const char* jinja : {"{%", "{#"}) {
    if (absl::StrContains(text, jinja)) {
      return place.Error(absl::StrCat(
          "Jinja statements (", jinja,
          " ...) are not supported; sdgd's prompts take {{column}} "
          "placeholders only"));
    }
  }
  return absl::OkStatus();
}

// An LLMBlock's config file: the prompt's parts and its tag pairs.
absl::Status LoadPromptConfig(const std::string& path, const Place& where,
                              v1::LlmStep& step, bool use_tags) {
  absl::StatusOr<YAML::Node> config = LoadYaml(path);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(where.text(), ": config_path: ",
                                     config.status().message()));
  }
  const Place place(path);
  if (absl::Status s =
          CheckKeys(*config, place,
                    {"system", "introduction", "principles", "examples",
                     "generation", "start_tags", "end_tags"});
      !s.ok()) {
    return s;
  }
  v1::PromptParts& parts = *step.mutable_prompt();
  for (const char* key :
       {"system", "introduction", "principles", "examples", "generation"}) {
    const YAML::Node node = (*config)[key];
    // A missing or null part is an empty string, as in LLMBlock.
    if (!node || node.IsNull()) continue;
    absl::StatusOr<std::string> text = String(node, place.Key(key));
    if (!text.ok()) return text.status();
    if (absl::Status s = CheckTemplateText(*text, place.Key(key)); !s.ok()) {
      return s;
    }
    const absl::string_view name = key;
    if (name == "system") parts.set_system(*text);
    if (name == "introduction") parts.set_introduction(*text);
    if (name == "principles") parts.set_principles(*text);
    if (name == "examples") parts.set_examples(*text);
    if (name == "generation") parts.set_generation(*text);
  }
  if (!use_tags) return absl::OkStatus();
  v1::TagParser& tags = *step.mutable_tags();
  if (absl::Status s =
          AppendStrings((*config)["start_tags"], place.Key("start_tags"),
                        tags.mutable_start_tags());
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          AppendStrings((*config)["end_tags"], place.Key("end_tags"),
                        tags.mutable_end_tags());
      !s.ok()) {
    return s;
  }
  if (tags.start_tags().empty()) {
    // No tags: the whole text, as an empty pair takes it.
    step.clear_tags();
  }
  return absl::OkStatus();
}

// An LLMBlock's parser_kwargs: true when it names the custom parser
// (whose pattern then replaces the prompt config's start and end tags).
absl::StatusOr<bool> LoadParserKwargs(const YAML::Node& parser,
                                      const Place& place, v1::LlmStep& step) {
  if (!parser) return false;
  const Place at = place.Key("parser_kwargs");
  SDG_RETURN_IF_ERROR(CheckKeys(
      parser, at, {"parser_name", "parsing_pattern", "parser_cleanup_tags"}));
  const YAML::Node name = parser["parser_name"];
  if (!name) return false;
  absl::StatusOr<std::string> text = String(name, at.Key("parser_name"));
  if (!text.ok()) return text.status();
  if (*text != "custom") {
    return at.Key("parser_name")
        .Error(absl::StrCat("unknown parser \"", *text,
                            "\" (InstructLab has \"custom\")"));
  }
  absl::StatusOr<std::string> pattern =
      RequiredString(parser, "parsing_pattern", at);
  if (!pattern.ok()) return pattern.status();
  step.mutable_pattern()->set_pattern(*pattern);
  SDG_RETURN_IF_ERROR(AppendStrings(
      parser["parser_cleanup_tags"], at.Key("parser_cleanup_tags"),
      step.mutable_pattern()->mutable_cleanup_tags()));
  return true;
}

// An LLMBlock's batch_kwargs: num_samples; the concurrency keys are
// sdgd's to decide, and are warned about.
absl::Status LoadBatchKwargs(const YAML::Node& batch, const Place& place,
                             std::vector<std::string>& warnings,
                             v1::LlmStep& step) {
  const Place at = place.Key("batch_kwargs");
  SDG_RETURN_IF_ERROR(
      CheckKeys(batch, at, {"num_samples", "num_procs", "batched"}));
  if (const YAML::Node samples = batch["num_samples"]) {
    absl::StatusOr<double> count = Number(samples, at.Key("num_samples"));
    if (!count.ok()) return count.status();
    step.set_num_samples(static_cast<int64_t>(*count));
  }
  for (const char* key : {"num_procs", "batched"}) {
    if (batch[key]) {
      warnings.push_back(absl::StrCat(
          at.Key(key).text(),
          ": ignored; sdgd's batch_size, num_workers and the server's "
          "in-flight caps set the concurrency"));
    }
  }
  return absl::OkStatus();
}

absl::Status LoadLlmBlock(const YAML::Node& config, const YAML::Node& block_gen,
                          const Place& place, const std::filesystem::path& dir,
                          const PipelineFileOptions& options,
                          std::vector<std::string>& warnings,
                          v1::LlmStep& step) {
  if (absl::Status s =
          CheckKeys(config, place,
                    {"config_path", "output_cols", "model_prompt", "gen_kwargs",
                     "parser_kwargs", "batch_kwargs"});
      !s.ok()) {
    return s;
  }
  v1::Block& block = *step.mutable_block();
  block.set_backend(options.backend);
  block.set_model(options.model);
  block.set_api(options.api);
  block.set_max_tokens(kDefaultMaxTokens);
  block.set_temperature(kDefaultTemperature);
  if (absl::Status s = ApplyGenKwargs(block_gen, place.Key("gen_kwargs"), step);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ApplyGenKwargs(config["gen_kwargs"], place.Key("gen_kwargs"), step);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          AppendStrings(config["output_cols"], place.Key("output_cols"),
                        step.mutable_output_columns());
      !s.ok()) {
    return s;
  }
  if (step.output_columns().empty()) {
    return place.Error("needs \"output_cols\"");
  }
  absl::StatusOr<bool> custom =
      LoadParserKwargs(config["parser_kwargs"], place, step);
  if (!custom.ok()) return custom.status();
  if (const YAML::Node batch = config["batch_kwargs"]) {
    SDG_RETURN_IF_ERROR(LoadBatchKwargs(batch, place, warnings, step));
  }
  absl::StatusOr<std::string> config_path =
      RequiredString(config, "config_path", place);
  if (!config_path.ok()) return config_path.status();
  std::filesystem::path resolved(*config_path);
  if (resolved.is_relative()) resolved = dir / resolved;
  if (absl::Status s = LoadPromptConfig(resolved.lexically_normal().string(),
                                        place, step, !*custom);
      !s.ok()) {
    return s;
  }
  if (const YAML::Node model_prompt = config["model_prompt"]) {
    absl::StatusOr<std::string> wrap =
        String(model_prompt, place.Key("model_prompt"));
    if (!wrap.ok()) return wrap.status();
    if (!wrap->empty()) {
      // LLMBlock formats the model prompt with the assembled prompt.
      const v1::PromptParts& parts = step.prompt();
      const std::string prompt = absl::StrJoin(
          {parts.system(), parts.introduction(), parts.principles(),
           parts.examples(), parts.generation()},
          "\n");
      block.set_prompt_template(
          absl::StrReplaceAll(*wrap, {{"{prompt}", prompt}}));
      step.clear_prompt();
    }
  }
  return absl::OkStatus();
}

absl::Status LoadColumnMap(const YAML::Node& config, const Place& place,
                           v1::ColumnMapStep& step) {
  if (absl::Status s = CheckKeys(config, place, {"columns_map"}); !s.ok()) {
    return s;
  }
  const YAML::Node map = config["columns_map"];
  if (!map || !map.IsMap() || map.size() == 0) {
    return place.Key("columns_map").Error("must map column names to names");
  }
  for (const auto& entry : map) {
    if (!entry.second.IsScalar()) {
      return place.Key("columns_map").Error("must map column names to names");
    }
    v1::ColumnPair& pair = *step.add_columns_map();
    pair.set_from(entry.first.Scalar());
    pair.set_to(entry.second.Scalar());
  }
  return absl::OkStatus();
}

absl::Status LoadFilter(const YAML::Node& config, const Place& place,
                        v1::FilterByValueStep& step) {
  if (absl::Status s = CheckKeys(config, place,
                                 {"filter_column", "filter_value", "operation",
                                  "convert_dtype", "default_value"});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> column =
      RequiredString(config, "filter_column", place);
  if (!column.ok()) return column.status();
  step.set_column(*column);
  const YAML::Node value = config["filter_value"];
  if (!value) return place.Error("needs \"filter_value\"");
  if (value.IsSequence()) {
    for (const YAML::Node& item : value) {
      if (!item.IsScalar()) {
        return place.Key("filter_value")
            .Error("must be a value or a list of values");
      }
      *step.add_values() = ScalarValue(item);
    }
  } else if (value.IsScalar()) {
    *step.add_values() = ScalarValue(value);
  } else {
    return place.Key("filter_value")
        .Error("must be a value or a list of values");
  }
  absl::StatusOr<std::string> operation =
      RequiredString(config, "operation", place);
  if (!operation.ok()) return operation.status();
  // Older files name Python's function: operator.eq.
  step.set_operation(absl::StartsWith(*operation, "operator.")
                         ? operation->substr(9)
                         : *operation);
  if (const YAML::Node convert = config["convert_dtype"]) {
    absl::StatusOr<std::string> type =
        String(convert, place.Key("convert_dtype"));
    if (!type.ok()) return type.status();
    step.set_convert_dtype(*type);
  }
  if (const YAML::Node fallback = config["default_value"]) {
    if (!fallback.IsScalar()) {
      return place.Key("default_value").Error("must be a value");
    }
    *step.mutable_default_value() = ScalarValue(fallback);
  }
  return absl::OkStatus();
}

absl::Status LoadBlock(const YAML::Node& node, const Place& file_place,
                       size_t index, const std::filesystem::path& dir,
                       const PipelineFileOptions& options,
                       std::vector<std::string>& warnings,
                       v1::PipelineStep& step) {
  if (!node.IsMap())
    return file_place.Block(index, "").Error("must be a mapping");
  const std::string name = node["name"] && node["name"].IsScalar()
                               ? node["name"].Scalar()
                               : std::string();
  const Place place = file_place.Block(index, name);
  if (absl::Status s = CheckKeys(node, place,
                                 {"name", "type", "config", "drop_columns",
                                  "drop_duplicates", "gen_kwargs"});
      !s.ok()) {
    return s;
  }
  if (name.empty()) return place.Error("needs \"name\"");
  step.set_name(name);
  absl::StatusOr<std::string> type = RequiredString(node, "type", place);
  if (!type.ok()) return type.status();
  const YAML::Node config = node["config"];
  if (!config) return place.Error("needs \"config\"");
  const Place at = place.Key("config");
  if (node["gen_kwargs"] && *type != "LLMBlock") {
    return place.Key("gen_kwargs").Error("only LLMBlock takes gen_kwargs");
  }
  absl::Status loaded;
  if (*type == "LLMBlock") {
    loaded = LoadLlmBlock(config, node["gen_kwargs"], at, dir, options,
                          warnings, *step.mutable_llm());
  } else if (*type == "FilterByValueBlock") {
    loaded = LoadFilter(config, at, *step.mutable_filter_by_value());
  } else if (*type == "DuplicateColumnsBlock") {
    loaded = LoadColumnMap(config, at, *step.mutable_duplicate_columns());
  } else if (*type == "RenameColumnsBlock") {
    loaded = LoadColumnMap(config, at, *step.mutable_rename_columns());
  } else if (*type == "CombineColumnsBlock") {
    loaded = CheckKeys(config, at, {"columns", "output_col", "separator"});
    v1::CombineColumnsStep& combine = *step.mutable_combine_columns();
    if (loaded.ok()) {
      loaded = AppendStrings(config["columns"], at.Key("columns"),
                             combine.mutable_columns());
    }
    if (loaded.ok()) {
      absl::StatusOr<std::string> output =
          RequiredString(config, "output_col", at);
      loaded = output.status();
      if (output.ok()) combine.set_output_column(*output);
    }
    if (loaded.ok() && config["separator"]) {
      absl::StatusOr<std::string> separator =
          String(config["separator"], at.Key("separator"));
      loaded = separator.status();
      if (separator.ok()) combine.set_separator(*separator);
    }
  } else if (*type == "FlattenColumnsBlock") {
    loaded = CheckKeys(config, at, {"var_cols", "value_name", "var_name"});
    v1::FlattenColumnsStep& flatten = *step.mutable_flatten_columns();
    if (loaded.ok()) {
      loaded = AppendStrings(config["var_cols"], at.Key("var_cols"),
                             flatten.mutable_var_columns());
    }
    for (const char* key : {"value_name", "var_name"}) {
      if (!loaded.ok()) break;
      absl::StatusOr<std::string> text = RequiredString(config, key, at);
      loaded = text.status();
      if (!text.ok()) break;
      if (absl::string_view(key) == "value_name") flatten.set_value_name(*text);
      if (absl::string_view(key) == "var_name") flatten.set_var_name(*text);
    }
  } else {
    return place.Key("type").Error(absl::StrCat(
        "unknown or unsupported block type \"", *type,
        "\"; sdgd runs LLMBlock, FilterByValueBlock, DuplicateColumnsBlock, "
        "RenameColumnsBlock, CombineColumnsBlock and FlattenColumnsBlock"));
  }
  if (!loaded.ok()) return loaded;
  if (absl::Status s =
          AppendStrings(node["drop_columns"], place.Key("drop_columns"),
                        step.mutable_drop_columns());
      !s.ok()) {
    return s;
  }
  return AppendStrings(node["drop_duplicates"], place.Key("drop_duplicates"),
                       step.mutable_drop_duplicates());
}

}  // namespace

absl::StatusOr<PipelineFile> LoadPipelineFile(
    const std::string& path, const PipelineFileOptions& options) {
  absl::StatusOr<YAML::Node> root = LoadYaml(path);
  if (!root.ok()) return root.status();
  const Place place(path);
  try {
    if (absl::Status s =
            CheckKeys(*root, place, {"version", "blocks", "datamixing"});
        !s.ok()) {
      return s;
    }
    absl::StatusOr<std::string> version =
        RequiredString(*root, "version", place);
    if (!version.ok()) return version.status();
    if (!absl::StartsWith(*version, "1.") && *version != "1") {
      return place.Key("version").Error(absl::StrCat(
          "version \"", *version, "\" is not 1.x, the format sdgctl reads"));
    }
    const YAML::Node blocks = (*root)["blocks"];
    if (!blocks || !blocks.IsSequence() || blocks.size() == 0) {
      return place.Key("blocks").Error("must be a list of blocks");
    }
    PipelineFile file;
    if ((*root)["datamixing"]) {
      file.warnings.push_back(absl::StrCat(
          path,
          ": datamixing is not run by sdgd (it mixes finished datasets; "
          "the pipeline's output is the same without it)"));
    }
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (absl::Status s = LoadBlock(blocks[i], place, i, dir, options,
                                     file.warnings, *file.pipeline.add_steps());
          !s.ok()) {
        return s;
      }
    }
    return file;
  } catch (const YAML::Exception& e) {
    return place.Error(absl::StrCat("unexpected YAML: ", e.what()));
  }
}

}  // namespace sdg
