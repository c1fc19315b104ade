/* A channel closed without close(2): dup2 puts a pipe over an event
 * channel's descriptor. Writes to that number must then reach the pipe
 * (they are no rdma_cm commands any more), fstat must describe the pipe,
 * and a new channel must work. Prints "cm dup2 ok" on success. */
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id;
  int p[2];
  if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || pipe(p)) { perror("setup"); return 1; }
  int fd = ch->fd;
  if (dup2(p[1], fd) != fd) { perror("dup2"); return 1; }
  struct stat st;
  if (fstat(fd, &st) || !S_ISFIFO(st.st_mode)) { fprintf(stderr, "fstat does not see the pipe\n"); return 1; }
  if (write(fd, "hello", 5) != 5) { perror("write to the pipe"); return 1; }
  char got[6] = {0};
  if (read(p[0], got, 5) != 5 || strcmp(got, "hello")) { fprintf(stderr, "the pipe got '%s'\n", got); return 1; }
  struct rdma_event_channel *again = rdma_create_event_channel();
  struct rdma_cm_id *id2;
  if (!again || rdma_create_id(again, &id2, NULL, RDMA_PS_TCP) || rdma_destroy_id(id2)) {
    perror("a new channel"); return 1;
  }
  printf("cm dup2 ok\n");
  return 0;
}
