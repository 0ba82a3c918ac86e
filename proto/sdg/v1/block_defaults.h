// The defaults of a Block's optional fields, in one place for sdgd and sdgctl:
// they are part of the API's contract (DESIGN.md), not of either program.
#ifndef SDG_PROTO_SDG_V1_BLOCK_DEFAULTS_H_
#define SDG_PROTO_SDG_V1_BLOCK_DEFAULTS_H_

#include <string>

#include "sdg/v1/generation.pb.h"

namespace sdg::v1 {

inline constexpr char kDefaultOutputColumn[] = "output";
inline constexpr int kDefaultBatchSize = 8;

// Block.output_column, "output" when empty.
inline std::string OutputColumnOf(const Block& block) {
  return block.output_column().empty() ? kDefaultOutputColumn
                                       : block.output_column();
}

// Block.n, 1 when 0.
inline int SamplesPerRowOf(const Block& block) {
  return block.n() > 0 ? block.n() : 1;
}

}  // namespace sdg::v1

#endif  // SDG_PROTO_SDG_V1_BLOCK_DEFAULTS_H_
