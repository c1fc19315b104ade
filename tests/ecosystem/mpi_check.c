/* Ping-pong between ranks 0 and 1 and an MPI_Allreduce over all ranks,
 * every byte and sum checked. Each rank says which softverbs device
 * configuration it runs with (its host's); rank 0 prints "mpi check ok"
 * at the end. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int rank) {
  fprintf(stderr, "rank %d: %s\n", rank, what);
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

int main(int argc, char **argv) {
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *dev = getenv("SOFTVERBS_DEVICES");
  printf("rank %d on %s\n", rank, dev ? dev : "(no SOFTVERBS_DEVICES)");
  fflush(stdout);
  size_t lens[] = {1, 4096, 1 << 20};
  for (int l = 0; l < 3; l++) {
    size_t n = lens[l];
    unsigned char *buf = malloc(n);
    for (int it = 0; it < 20; it++) {
      if (rank == 0) {
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 7 + it);
        MPI_Send(buf, (int)n, MPI_BYTE, 1, it, MPI_COMM_WORLD);
        memset(buf, 0, n);
        MPI_Recv(buf, (int)n, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < n; i++)
          if (buf[i] != (unsigned char)(i * 7 + it + 1)) return fail("ping-pong data differs", rank);
      } else if (rank == 1) {
        MPI_Recv(buf, (int)n, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < n; i++) buf[i]++;
        MPI_Send(buf, (int)n, MPI_BYTE, 0, it, MPI_COMM_WORLD);
      }
    }
    free(buf);
  }
  enum { N = 100000 };
  long *in = malloc(N * sizeof *in), *out = malloc(N * sizeof *out);
  for (int i = 0; i < N; i++) in[i] = (long)rank * N + i;
  MPI_Allreduce(in, out, N, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < N; i++) {
    long want = (long)N * size * (size - 1) / 2 + (long)size * i;
    if (out[i] != want) return fail("allreduce sum differs", rank);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi check ok: %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
