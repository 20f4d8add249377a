// One worker of a 2-process job that tests/package/run.cmake starts with the
// installed `ember launch`: each process joins the job through the
// Accelerator, and the sum over processes of (rank + 1) must be 1 + 2 = 3.
#include <ember/ember.h>

#include <cstdio>

int main() try {
  ember::Accelerator accelerator({.cpu = true});
  int rank = accelerator.process_index();
  ember::Tensor mine = ember::full({1}, double(rank + 1));
  double total = accelerator.reduce(mine, "sum").item<double>();
  bool ok = accelerator.num_processes() == 2 && total == 3.0;
  std::printf("process %d of %d: sum %.1f, %s\n", rank, accelerator.num_processes(), total,
              ok ? "launch ok" : "launch WRONG");
  return ok ? 0 : 1;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
