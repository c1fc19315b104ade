/* rdma_cm in a forked child: the parent starts using rdma_cm (an event
 * channel and an id), then forks; the child, with channels and ids of its
 * own, resolves ADDR and PORT and connects to a port nobody listens on,
 * which must end in RDMA_CM_EVENT_REJECTED (the CM's answer arriving in
 * the child), not a hang. The parent's channel, inherited, answers EBADF
 * in the child (a blocking rdma_get_cm_event on it waited for ever,
 * 2026-12-07). The parent then does the same. Prints
 * "cm fork ok" on success. Usage: cm_fork ADDR PORT */
#include <rdma/rdma_cma.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, const char *who) {
  struct rdma_cm_event *ev;
  if (rdma_get_cm_event(ch, &ev)) { perror("rdma_get_cm_event"); return -1; }
  enum rdma_cm_event_type got = ev->event;
  rdma_ack_cm_event(ev);
  if (got != want) {
    fprintf(stderr, "%s: got %s, want %s\n", who, rdma_event_str(got), rdma_event_str(want));
    return -1;
  }
  return 0;
}

/* Resolves and connects to ADDR:PORT; 0 if the connection is REJECTED. */
static int rejected(const char *addr, const char *port, const char *who) {
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id;
  struct addrinfo *ai;
  if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) { perror("create"); return -1; }
  if (getaddrinfo(addr, port, NULL, &ai)) { fprintf(stderr, "getaddrinfo\n"); return -1; }
  if (rdma_resolve_addr(id, NULL, ai->ai_addr, 2000) ||
      expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, who) ||
      rdma_resolve_route(id, 2000) || expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, who))
    return -1;
  struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
    .max_recv_sge = 1}, .qp_type = IBV_QPT_RC};
  if (rdma_create_qp(id, NULL, &qa)) { perror("rdma_create_qp"); return -1; }
  struct rdma_conn_param cp = {.retry_count = 1};
  if (rdma_connect(id, &cp) || expect(ch, RDMA_CM_EVENT_REJECTED, who)) return -1;
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  freeaddrinfo(ai);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: cm_fork ADDR PORT\n"); return 2; }
  /* The parent's rdma_cm is in use when it forks. */
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id;
  if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) { perror("parent create"); return 1; }
  pid_t child = fork();
  if (child < 0) { perror("fork"); return 1; }
  if (child == 0) {
    if (rejected(argv[1], argv[2], "child")) _exit(1);
    struct rdma_cm_event *ev;
    int rc = rdma_get_cm_event(ch, &ev);
    if (rc == 0 || errno != EBADF) {
      fprintf(stderr, "child: the parent's channel answered %d, errno %d, want EBADF\n", rc, errno);
      _exit(1);
    }
    _exit(0);
  }
  int status;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
    fprintf(stderr, "the child failed\n");
    return 1;
  }
  if (rejected(argv[1], argv[2], "parent")) return 1;
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  printf("cm fork ok\n");
  return 0;
}
