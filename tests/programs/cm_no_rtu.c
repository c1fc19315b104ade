/* An active side that dies between the REP and its RTU: the kernel's CM
 * rejects the REP it had not answered (cm_destroy_id in REP_RCVD), so the
 * passive side gets RDMA_CM_EVENT_REJECTED, not DISCONNECTED before any
 * ESTABLISHED (rping's server waited for ever on that). The parent listens
 * on ADDR:PORT and accepts; a forked child connects without a QP (so
 * librdmacm hands it the CONNECT_RESPONSE instead of sending the RTU) and
 * exits on it. Prints "cm no rtu ok" on success. Usage: cm_no_rtu ADDR PORT */
#include <rdma/rdma_cma.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The next event on `ch` within 15 s: its type, or -1. */
static int next_event(struct rdma_event_channel *ch, struct rdma_cm_id **id) {
  struct pollfd p = {.fd = ch->fd, .events = POLLIN};
  if (poll(&p, 1, 15000) != 1) { fprintf(stderr, "no event within 15 s\n"); return -1; }
  struct rdma_cm_event *ev;
  if (rdma_get_cm_event(ch, &ev)) { perror("rdma_get_cm_event"); return -1; }
  int got = ev->event;
  if (id) *id = ev->id;
  rdma_ack_cm_event(ev);
  return got;
}

static int expect(struct rdma_event_channel *ch, int want, const char *who) {
  int got = next_event(ch, NULL);
  if (got == want) return 0;
  fprintf(stderr, "%s: got %s, want %s\n", who, got < 0 ? "nothing" : rdma_event_str(got),
          rdma_event_str(want));
  return -1;
}

/* The child: connects without a QP and exits on the REP, sending no RTU. */
static int client(struct addrinfo *ai) {
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id;
  if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) { perror("client create"); return 1; }
  if (rdma_resolve_addr(id, NULL, ai->ai_addr, 2000) ||
      expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "client") ||
      rdma_resolve_route(id, 2000) || expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "client"))
    return 1;
  struct rdma_conn_param cp = {.qp_num = 0x1234, .responder_resources = 1, .initiator_depth = 1,
    .retry_count = 7, .rnr_retry_count = 7};
  if (rdma_connect(id, &cp) || expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, "client")) return 1;
  _exit(0); /* dies holding the REP, its RTU unsent */
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: cm_no_rtu ADDR PORT\n"); return 2; }
  struct addrinfo *ai;
  if (getaddrinfo(argv[1], argv[2], NULL, &ai)) { fprintf(stderr, "getaddrinfo\n"); return 2; }
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *listener, *conn;
  if (!ch || rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) ||
      rdma_bind_addr(listener, ai->ai_addr) || rdma_listen(listener, 1)) {
    perror("listen");
    return 1;
  }
  pid_t child = fork();
  if (child < 0) { perror("fork"); return 1; }
  if (child == 0) _exit(client(ai));
  if (next_event(ch, &conn) != RDMA_CM_EVENT_CONNECT_REQUEST) {
    fprintf(stderr, "server: no CONNECT_REQUEST\n");
    return 1;
  }
  struct rdma_conn_param cp = {.qp_num = 0x5678, .responder_resources = 1, .initiator_depth = 1};
  if (rdma_accept(conn, &cp)) { perror("rdma_accept"); return 1; }
  int status;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
    fprintf(stderr, "the client failed before the REP\n");
    return 1;
  }
  if (expect(ch, RDMA_CM_EVENT_REJECTED, "server")) return 1;
  rdma_destroy_id(conn);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(ch);
  freeaddrinfo(ai);
  printf("cm no rtu ok\n");
  return 0;
}
