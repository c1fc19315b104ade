/* One side of a connection being set up goes away, the two sides in
 * separate processes (on one host, rdma_cm.sh; between network
 * namespaces, netns.sh; against the kernel's rdma_cm, tests/interop).
 *
 * An active side gives up its REQ before any answer: its REJ "timeout"
 * (the kernel's cm_destroy_id in REQ_SENT: its comm ID, its CA GUID in the
 * ARI) must end the passive side's request, whose ACCEPT then fails with
 * EINVAL or, if its REP went out first, gets REJECTED; never a wait for an
 * RTU.
 *
 * Or a passive side dies after its REP, before the RTU: the REJ its
 * id's destruction sends (cm_destroy_id in REP_SENT: both comm IDs) must
 * end the active side's connection, which would otherwise be established
 * with nobody.
 *
 * Three FIFOs order the two processes: the server writes to READY once it
 * listens and to REQ once it has the CONNECT_REQUEST; whoever runs the
 * client (or, with "dies", the server) writes to GONE once it has exited.
 *
 *   cm_give_up server ADDR PORT READY REQ GONE
 *     waits for GONE, then accepts; prints "give up ok (...)" on success
 *   cm_give_up server ADDR PORT READY REQ GONE dies
 *     accepts at once, then exits without destroying its ids
 *   cm_give_up client ADDR PORT READY REQ gives-up|dies
 *     connects, waits for REQ, then destroys its id and exits
 *     ("gives-up") or exits without destroying it ("dies")
 *   cm_give_up client ADDR PORT READY REQ outlives GONE
 *     connects, waits for REQ and GONE, then takes the REP: prints "give
 *     up ok (...)" once the connection ended */
#include "cm_util.h"
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes one byte to FIFO `path` (waits for its reader). */
static int signal_fifo(const char *path) {
  int fd = open(path, O_WRONLY);
  char c = 1;
  int ok = fd >= 0 && write(fd, &c, 1) == 1;
  if (fd >= 0) close(fd);
  if (!ok) perror(path);
  return ok ? 0 : -1;
}

/* Reads one byte from FIFO `path` (waits for its writer). */
static int wait_fifo(const char *path) {
  int fd = open(path, O_RDONLY);
  char c;
  int ok = fd >= 0 && read(fd, &c, 1) == 1;
  if (fd >= 0) close(fd);
  if (!ok) fprintf(stderr, "%s: nothing came\n", path);
  return ok ? 0 : -1;
}

static int server(struct addrinfo *ai, char **fifos, int dies) {
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *listener, *conn;
  if (!ch || rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) ||
      rdma_bind_addr(listener, ai->ai_addr) || rdma_listen(listener, 1)) {
    perror("listen");
    return 1;
  }
  if (signal_fifo(fifos[0])) return 1;
  if (next_event(ch, &conn, NULL) != RDMA_CM_EVENT_CONNECT_REQUEST) {
    fprintf(stderr, "no CONNECT_REQUEST\n");
    return 1;
  }
  struct rdma_conn_param cp = {.qp_num = 0x5678, .responder_resources = 1, .initiator_depth = 1};
  if (dies) {
    if (signal_fifo(fifos[1]) || rdma_accept(conn, &cp)) { perror("rdma_accept"); return 1; }
    printf("server accepted and exits\n");
    fflush(stdout);
    _exit(0); /* its ids are left to the exit */
  }
  if (signal_fifo(fifos[1]) || wait_fifo(fifos[2])) return 1;
  if (rdma_accept(conn, &cp)) {
    if (errno != EINVAL) { perror("rdma_accept"); return 1; }
    printf("give up ok (accept EINVAL)\n");
    return 0;
  }
  int status = 0, got = next_event(ch, NULL, &status);
  if (got != RDMA_CM_EVENT_REJECTED) {
    fprintf(stderr, "after the accept: got %s, want REJECTED\n",
            got < 0 ? "nothing" : rdma_event_str(got));
    return 1;
  }
  printf("give up ok (REJECTED %d)\n", status);
  return 0;
}

/* The active side of a server that died after its REP: each event until
 * the connection ends (REJECTED, or CONNECT_ERROR when the RTU could not
 * go, or DISCONNECTED after an ESTABLISHED). */
static int outlive_server(struct rdma_event_channel *ch) {
  char seen[256] = "";
  for (int n = 0; n < 4; n++) {
    int got = next_event(ch, NULL, NULL);
    if (got < 0) break;
    snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%s%s", n ? " " : "",
             rdma_event_str(got));
    if (got == RDMA_CM_EVENT_REJECTED || got == RDMA_CM_EVENT_CONNECT_ERROR ||
        got == RDMA_CM_EVENT_DISCONNECTED) {
      printf("give up ok (%s)\n", seen);
      return 0;
    }
  }
  fprintf(stderr, "the connection did not end: %s\n", seen);
  return 1;
}

static int client(struct addrinfo *ai, char **fifos, const char *mode) {
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id;
  if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || wait_fifo(fifos[0])) return 1;
  if (rdma_resolve_addr(id, NULL, ai->ai_addr, 2000) ||
      expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "client") || rdma_resolve_route(id, 2000) ||
      expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "client"))
    return 1;
  struct rdma_conn_param cp = {.qp_num = 0x1234, .responder_resources = 1, .initiator_depth = 1,
    .retry_count = 7, .rnr_retry_count = 7};
  if (rdma_connect(id, &cp)) { perror("rdma_connect"); return 1; }
  if (wait_fifo(fifos[1])) return 1;
  if (!strcmp(mode, "outlives")) return wait_fifo(fifos[3]) ? 1 : outlive_server(ch);
  int destroy = !strcmp(mode, "gives-up");
  if (destroy && rdma_destroy_id(id)) { perror("rdma_destroy_id"); return 1; }
  printf("client %s\n", destroy ? "gave up" : "exits");
  fflush(stdout);
  _exit(0); /* no clean-up: "dies" leaves its id to the exit */
}

int main(int argc, char **argv) {
  if (argc < 7) argc = 0; /* usage */
  int is_server = argc && !strcmp(argv[1], "server") &&
                  (argc == 7 || (argc == 8 && !strcmp(argv[7], "dies")));
  int is_client = argc && !strcmp(argv[1], "client") &&
                  ((argc == 7 && (!strcmp(argv[6], "gives-up") || !strcmp(argv[6], "dies"))) ||
                   (argc == 8 && !strcmp(argv[6], "outlives")));
  if (!is_server && !is_client) {
    fprintf(stderr, "usage: cm_give_up server ADDR PORT READY REQ GONE [dies]\n"
                    "       cm_give_up client ADDR PORT READY REQ gives-up|dies\n"
                    "       cm_give_up client ADDR PORT READY REQ outlives GONE\n");
    return 2;
  }
  struct addrinfo *ai;
  if (getaddrinfo(argv[2], argv[3], NULL, &ai)) { fprintf(stderr, "getaddrinfo\n"); return 2; }
  if (is_server) return server(ai, argv + 4, argc == 8);
  /* The client's FIFOs: READY, REQ, its mode's place, then GONE. */
  return client(ai, argv + 4, argv[6]);
}
