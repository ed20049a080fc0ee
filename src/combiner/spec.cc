// The untyped half of CombinerSpec: building the layout one builder call at
// a time, and the flow of partials that Cluster::declare compares.
#include <memory>

#include "combiner/layout.h"
#include "combiner/partial.h"
#include "sluice/combiner.h"

namespace sluice::detail {
namespace {

// Every builder call copies the layout, changes the copy and replaces it:
// specs are values, and copies of a spec (and the sources, targets and
// results made from it) keep the layout they had.
template <class F>
std::shared_ptr<const CombineLayout> changed(const CombineLayout& from, F&& change) {
  auto to = std::make_shared<CombineLayout>(from);
  change(*to);
  to->rebuild();
  return to;
}

}  // namespace

CombinerSpecCore::CombinerSpecCore(std::string name, std::string type_name, uint32_t record_size)
    : flow_(shuffle<Bytes>(name).key(kPartialKeyOffset, 8).spec()) {
  auto layout = std::make_shared<CombineLayout>();
  layout->name = std::move(name);
  layout->type_name = std::move(type_name);
  layout->record_size = record_size;
  layout->rebuild();
  layout_ = std::move(layout);
}

void CombinerSpecCore::group_by(uint32_t offset, ValueType type) {
  layout_ = changed(*layout_, [&](CombineLayout& l) {
    l.has_key = true;
    l.key_offset = offset;
    l.key_type = type;
  });
}

void CombinerSpecCore::add(uint32_t offset, ValueType type, uint8_t aggs) {
  layout_ = changed(*layout_, [&](CombineLayout& l) { l.declare_field(offset, type, aggs); });
}

void CombinerSpecCore::count() {
  layout_ = changed(*layout_, [](CombineLayout& l) { l.count = true; });
}

size_t CombinerSpecCore::field(uint32_t offset, ValueType type, const char* what) const {
  return layout_->field_index(offset, type, what);
}

std::string CombinerSpecCore::describe() const { return layout_->describe(); }

void CombinerSpecCore::validate() const {
  const CombineLayout& l = *layout_;
  l.validate();
  flow_.validate();
  if (local_groups_ == 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "combiner '" + l.name + "': local_groups must be at least 1");
  }
  const size_t stride = record_stride(l.partial_bytes());
  if (stride > flow_.effective_segment_bytes()) {
    throw Error(ErrorCode::kInvalidArgument, "combiner '" + l.name + "': a partial of " +
                                                 std::to_string(stride) +
                                                 " bytes does not fit a segment of " +
                                                 std::to_string(flow_.effective_segment_bytes()) +
                                                 " bytes; raise segment_bytes");
  }
}

FlowSpec CombinerSpecCore::flow_spec() const {
  validate();
  FlowSpec spec = flow_;
  // The partials' layout is the flow's record type: declare compares it, so
  // participants that aggregate differently fail there, naming the field,
  // rather than at the first partial. A layout too long to be a type tag
  // (over a dozen fields) is named by its hash, which partials carry anyway.
  const CombineLayout& l = *layout_;
  std::string text = "combiner " + std::to_string(l.record_size) + "-byte records: " + describe();
  if (text.size() > 1000) {
    text = "combiner " + std::to_string(l.record_size) + "-byte records, layout hash " +
           std::to_string(l.tag);
  }
  FlowSpecAccess::type_name(spec) = std::move(text);
  return spec;
}

}  // namespace sluice::detail
