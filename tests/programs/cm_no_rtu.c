/* One side of a connection dies between the REP and the RTU; the kernel's
 * CM then rejects in its name (cm_destroy_id), so the other side gets
 * RDMA_CM_EVENT_REJECTED, never a connection that hangs or a DISCONNECTED
 * before any ESTABLISHED (rping's server waited for ever on that).
 *
 * Mode "active" (REP_RCVD): the parent listens on ADDR:PORT and accepts; a
 * forked child connects without a QP (so librdmacm hands it the
 * CONNECT_RESPONSE instead of sending the RTU) and exits on it.
 * Mode "passive" (REP_SENT): a forked child listens and accepts, and exits
 * once the parent, which connected without a QP, has the REP (and so has
 * not sent the RTU).
 * Prints "cm no rtu ok" on success. Usage: cm_no_rtu ADDR PORT active|passive */
#include "cm_util.h"
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A listener on `ai` (on a channel of its own, in *ch). */
static struct rdma_cm_id *listen_on(struct addrinfo *ai, struct rdma_event_channel **ch) {
  struct rdma_cm_id *listener;
  *ch = rdma_create_event_channel();
  if (!*ch || rdma_create_id(*ch, &listener, NULL, RDMA_PS_TCP) ||
      rdma_bind_addr(listener, ai->ai_addr) || rdma_listen(listener, 1)) {
    perror("listen");
    return NULL;
  }
  return listener;
}

/* Takes the next CONNECT_REQUEST on `ch` and accepts it (a REP). */
static int accept_next(struct rdma_event_channel *ch) {
  struct rdma_cm_id *conn;
  if (next_event(ch, &conn, NULL) != RDMA_CM_EVENT_CONNECT_REQUEST) {
    fprintf(stderr, "server: no CONNECT_REQUEST\n");
    return 1;
  }
  struct rdma_conn_param cp = {.qp_num = 0x5678, .responder_resources = 1, .initiator_depth = 1};
  if (rdma_accept(conn, &cp)) { perror("rdma_accept"); return 1; }
  return 0;
}

/* Connects to `ai` without a QP, through to the REP (CONNECT_RESPONSE):
 * the RTU is not sent. Its channel in *ch. */
static int connect_to_rep(struct addrinfo *ai, struct rdma_event_channel **ch) {
  struct rdma_cm_id *id;
  *ch = rdma_create_event_channel();
  if (!*ch || rdma_create_id(*ch, &id, NULL, RDMA_PS_TCP)) { perror("client create"); return 1; }
  if (rdma_resolve_addr(id, NULL, ai->ai_addr, 2000) ||
      expect(*ch, RDMA_CM_EVENT_ADDR_RESOLVED, "client") ||
      rdma_resolve_route(id, 2000) || expect(*ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "client"))
    return 1;
  struct rdma_conn_param cp = {.qp_num = 0x1234, .responder_resources = 1, .initiator_depth = 1,
    .retry_count = 7, .rnr_retry_count = 7};
  if (rdma_connect(id, &cp) || expect(*ch, RDMA_CM_EVENT_CONNECT_RESPONSE, "client")) return 1;
  return 0;
}

static int exited_well(pid_t child, const char *what) {
  int status;
  if (waitpid(child, &status, 0) == child && WIFEXITED(status) && !WEXITSTATUS(status)) return 1;
  fprintf(stderr, "%s\n", what);
  return 0;
}

/* The active side dies holding the REP: the parent, listening, is rejected. */
static int active_dies(struct addrinfo *ai) {
  struct rdma_event_channel *ch, *cch;
  if (!listen_on(ai, &ch)) return 1;
  pid_t child = fork();
  if (child < 0) { perror("fork"); return 1; }
  if (child == 0) _exit(connect_to_rep(ai, &cch)); /* dies, its RTU unsent */
  if (accept_next(ch) || !exited_well(child, "the client failed before the REP")) return 1;
  return expect(ch, RDMA_CM_EVENT_REJECTED, "server") ? 1 : 0;
}

/* The passive side dies after its REP, before any RTU: the parent, which
 * holds the REP, is rejected. */
static int passive_dies(struct addrinfo *ai) {
  int listening[2], got_rep[2];
  if (pipe(listening) || pipe(got_rep)) { perror("pipe"); return 1; }
  pid_t child = fork();
  if (child < 0) { perror("fork"); return 1; }
  if (child == 0) {
    struct rdma_event_channel *ch;
    char c = 1;
    if (!listen_on(ai, &ch) || write(listening[1], &c, 1) != 1 || accept_next(ch)) _exit(1);
    _exit(read(got_rep[0], &c, 1) == 1 ? 0 : 1); /* dies, its REP unanswered */
  }
  struct rdma_event_channel *ch;
  char c;
  if (read(listening[0], &c, 1) != 1 || connect_to_rep(ai, &ch)) return 1;
  if (write(got_rep[1], &c, 1) != 1 || !exited_well(child, "the server failed before its REP"))
    return 1;
  return expect(ch, RDMA_CM_EVENT_REJECTED, "client") ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc != 4 || (strcmp(argv[3], "active") && strcmp(argv[3], "passive"))) {
    fprintf(stderr, "usage: cm_no_rtu ADDR PORT active|passive\n");
    return 2;
  }
  struct addrinfo *ai;
  if (getaddrinfo(argv[1], argv[2], NULL, &ai)) { fprintf(stderr, "getaddrinfo\n"); return 2; }
  int failed = strcmp(argv[3], "active") ? passive_dies(ai) : active_dies(ai);
  freeaddrinfo(ai);
  if (failed) return 1;
  printf("cm no rtu ok\n");
  return 0;
}
