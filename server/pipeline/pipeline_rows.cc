#include "server/pipeline/pipeline_rows.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace sdg {
namespace {

// The row with its columns replaced; its seed row, key and lineage kept.
PipelineRow WithColumns(const PipelineRow& row,
                        google::protobuf::Struct columns) {
  PipelineRow out;
  out.set_row_index(row.row_index());
  *out.mutable_order_key() = row.order_key();
  *out.mutable_lineage() = row.lineage();
  *out.mutable_columns() = std::move(columns);
  return out;
}

void DropColumnsOf(const StepSpec& step, std::vector<PipelineRow>& rows) {
  if (step.drop_columns.empty()) return;
  for (PipelineRow& row : rows)
    DropColumns(step.drop_columns, *row.mutable_columns());
}

// Applies a step that changes each row in place.
template <typename Fn>
StepOutput EachRow(const StepSpec& step, std::vector<PipelineRow> rows, Fn fn) {
  StepOutput out;
  out.rows.reserve(rows.size());
  for (PipelineRow& row : rows) {
    if (absl::Status s = fn(*row.mutable_columns()); !s.ok()) {
      out.failed.push_back(FailureOf(step, row, std::move(s)));
      continue;
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

struct ColumnStepVisitor {
  const StepSpec& step;
  std::vector<PipelineRow>& rows;

  StepOutput operator()(const LlmStepSpec&) {
    // LLM steps go through ExpandGenerations; reaching here is a bug.
    StepOutput out;
    for (const PipelineRow& row : rows) {
      out.failed.push_back(FailureOf(
          step, row, absl::InternalError("an LLM step needs its backend")));
    }
    return out;
  }
  StepOutput operator()(const ValueFilter& filter) {
    StepOutput out;
    for (PipelineRow& row : rows) {
      absl::StatusOr<bool> keep = filter.Keep(*row.mutable_columns());
      if (!keep.ok()) {
        out.failed.push_back(FailureOf(step, row, keep.status()));
      } else if (*keep) {
        out.rows.push_back(std::move(row));
      }
    }
    return out;
  }
  StepOutput operator()(const DuplicateStepSpec& spec) {
    return EachRow(step, std::move(rows), [&](Row& columns) {
      return DuplicateColumns(spec.columns, columns);
    });
  }
  StepOutput operator()(const RenameStepSpec& spec) {
    return EachRow(step, std::move(rows), [&](Row& columns) {
      return RenameColumns(spec.columns, columns);
    });
  }
  StepOutput operator()(const CombineStepSpec& spec) {
    return EachRow(step, std::move(rows), [&](Row& columns) {
      return CombineColumns(spec.columns, spec.output_column, spec.separator,
                            columns);
    });
  }
  StepOutput operator()(const FlattenStepSpec& spec) {
    StepOutput out;
    for (const PipelineRow& row : rows) {
      absl::StatusOr<std::vector<Row>> flat = FlattenColumns(
          spec.var_columns, spec.value_name, spec.var_name, row.columns());
      if (!flat.ok()) {
        out.failed.push_back(FailureOf(step, row, flat.status()));
        continue;
      }
      for (size_t c = 0; c < flat->size(); ++c) {
        PipelineRow& made =
            out.rows.emplace_back(WithColumns(row, std::move((*flat)[c])));
        // Variable-major: the column's index leads the key.
        made.mutable_order_key()->Clear();
        made.add_order_key(static_cast<int64_t>(c));
        made.mutable_order_key()->MergeFrom(row.order_key());
        v1::LineageStep* lineage = made.add_lineage();
        lineage->set_step(step.name);
        lineage->set_column_index(static_cast<int32_t>(c));
      }
    }
    return out;
  }
};

}  // namespace

std::vector<PipelineRow> SeedRows(int64_t first_row,
                                  std::vector<google::protobuf::Struct> rows) {
  std::vector<PipelineRow> seeds(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t row_index = first_row + static_cast<int64_t>(i);
    seeds[i].set_row_index(row_index);
    seeds[i].add_order_key(row_index);
    *seeds[i].mutable_columns() = std::move(rows[i]);
  }
  return seeds;
}

bool OrderKeyLess(const PipelineRow& a, const PipelineRow& b) {
  return std::lexicographical_compare(
      a.order_key().begin(), a.order_key().end(), b.order_key().begin(),
      b.order_key().end());
}

PipelineRowFailure FailureOf(const StepSpec& step, const PipelineRow& row,
                             absl::Status status, int attempts) {
  return PipelineRowFailure{step.index,
                            row.row_index(),
                            {row.order_key().begin(), row.order_key().end()},
                            std::move(status),
                            attempts};
}

StepOutput ApplyColumnStep(const StepSpec& step,
                           std::vector<PipelineRow> rows) {
  StepOutput out = std::visit(ColumnStepVisitor{step, rows}, step.kind);
  DropColumnsOf(step, out.rows);
  return out;
}

void PrepareLlmRows(const LlmStepSpec& llm, std::vector<PipelineRow>& rows) {
  if (!llm.num_samples.has_value()) return;
  for (PipelineRow& row : rows) {
    auto& fields = *row.mutable_columns()->mutable_fields();
    if (!fields.contains("num_samples")) {
      fields["num_samples"].set_number_value(
          static_cast<double>(*llm.num_samples));
    }
  }
}

StepOutput ExpandGenerations(
    const StepSpec& step, std::vector<PipelineRow> rows,
    std::vector<absl::StatusOr<std::vector<std::string>>> texts,
    const std::vector<int>& attempts) {
  const LlmStepSpec& llm = *step.llm();
  const std::vector<std::string>& columns = llm.parser.columns();
  StepOutput out;
  for (size_t r = 0; r < rows.size(); ++r) {
    PipelineRow& row = rows[r];
    if (!texts[r].ok()) {
      out.failed.push_back(
          FailureOf(step, row, texts[r].status(), attempts[r]));
      continue;
    }
    // Every match of every sample, parsed first: a parse that fails (the
    // pattern's match limit) fails the row, not part of it.
    std::vector<std::vector<ParsedValues>> parsed;
    absl::Status parse_error;
    for (const std::string& text : *texts[r]) {
      absl::StatusOr<std::vector<ParsedValues>> matches =
          llm.parser.Parse(PythonStrip(text));
      if (!matches.ok()) {
        parse_error = matches.status();
        break;
      }
      parsed.push_back(*std::move(matches));
    }
    if (!parse_error.ok()) {
      out.failed.push_back(FailureOf(step, row, parse_error, attempts[r]));
      continue;
    }
    for (size_t s = 0; s < parsed.size(); ++s) {
      for (size_t m = 0; m < parsed[s].size(); ++m) {
        PipelineRow& made =
            out.rows.emplace_back(WithColumns(row, row.columns()));
        auto& fields = *made.mutable_columns()->mutable_fields();
        for (size_t c = 0; c < columns.size(); ++c) {
          const std::optional<std::string>& value = parsed[s][m][c];
          if (value.has_value()) {
            fields[columns[c]].set_string_value(*value);
          } else {
            fields[columns[c]].set_null_value(google::protobuf::NULL_VALUE);
          }
        }
        made.add_order_key(static_cast<int64_t>(s));
        made.add_order_key(static_cast<int64_t>(m));
        v1::LineageStep* lineage = made.add_lineage();
        lineage->set_step(step.name);
        lineage->set_sample_index(static_cast<int32_t>(s));
        lineage->set_match_index(static_cast<int32_t>(m));
      }
    }
  }
  DropColumnsOf(step, out.rows);
  return out;
}

std::vector<PipelineRowFailure> TakeRowsWithoutKey(
    const StepSpec& step, std::vector<PipelineRow>& rows) {
  std::vector<PipelineRowFailure> failed;
  if (step.drop_duplicates.empty()) return failed;
  std::vector<PipelineRow> kept;
  kept.reserve(rows.size());
  for (PipelineRow& row : rows) {
    absl::StatusOr<std::string> key =
        DuplicateKey(step.drop_duplicates, row.columns());
    if (!key.ok()) {
      failed.push_back(FailureOf(step, row, key.status()));
      continue;
    }
    kept.push_back(std::move(row));
  }
  rows = std::move(kept);
  return failed;
}

bool DuplicateFilter::Keep(const PipelineRow& row) {
  absl::StatusOr<std::string> key =
      DuplicateKey(step_->drop_duplicates, row.columns());
  return !key.ok() || seen_.insert(*std::move(key)).second;
}

std::vector<PipelineRow> DropDuplicates(const StepSpec& step,
                                        std::vector<PipelineRow> rows) {
  std::stable_sort(rows.begin(), rows.end(), OrderKeyLess);
  DuplicateFilter filter(step);
  std::vector<PipelineRow> kept;
  kept.reserve(rows.size());
  for (PipelineRow& row : rows) {
    if (filter.Keep(row)) kept.push_back(std::move(row));
  }
  return kept;
}

}  // namespace sdg
