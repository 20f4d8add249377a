// default_collate: stacking examples into a batch. Called by Dataset::get_batch
// and by DataLoader when no `collate` option is given.
#include "data/example.h"

#include "core/error.h"
#include "core/ops/indexing.h"

namespace ember::data {

namespace {
// Stacks field `name` across examples; all defined or all undefined.
Tensor stack_field(const std::vector<Example>& examples, const char* name, auto field) {
  size_t defined = 0;
  for (const Example& example : examples) defined += field(example).defined() ? 1 : 0;
  if (defined == 0) return {};
  EMBER_CHECK(defined == examples.size(), "default_collate: field '{}' is defined in {} of {} examples", name, defined,
              examples.size());
  std::vector<Tensor> parts;
  parts.reserve(examples.size());
  for (const Example& example : examples) parts.push_back(field(example));
  return stack(parts, 0);
}
}  // namespace

Example default_collate(const std::vector<Example>& examples) {
  EMBER_CHECK(!examples.empty(), "default_collate: expected at least one example");
  Example batch;
  batch.input = stack_field(examples, "input", [](const Example& e) -> const Tensor& { return e.input; });
  batch.target = stack_field(examples, "target", [](const Example& e) -> const Tensor& { return e.target; });
  size_t num_extra = examples[0].extra.size();
  for (size_t i = 0; i < examples.size(); ++i)
    EMBER_CHECK(examples[i].extra.size() == num_extra,
                "default_collate: example 0 has {} extra fields but example {} has {}", num_extra, i,
                examples[i].extra.size());
  for (size_t field = 0; field < num_extra; ++field)
    batch.extra.push_back(
        stack_field(examples, "extra", [field](const Example& e) -> const Tensor& { return e.extra[field]; }));
  return batch;
}

}  // namespace ember::data
