/* An active side gives up its REQ before any answer, the two sides in
 * separate processes (on one host, rdma_cm.sh; between network
 * namespaces, netns.sh; against the kernel's rdma_cm, tests/interop): its
 * REJ "timeout" (the kernel's
 * cm_destroy_id in REQ_SENT: its comm ID, its CA GUID in the ARI) must end
 * the passive side's request, whose ACCEPT then fails with EINVAL or, if
 * its REP went out first, gets REJECTED; never a wait for an RTU.
 *
 * Three FIFOs order the two processes: the server writes to READY once it
 * listens and to REQ once it has the CONNECT_REQUEST; whoever runs the
 * client writes to GONE once the client has exited.
 *
 *   cm_give_up server ADDR PORT READY REQ GONE
 *     prints "give up ok (...)" on success
 *   cm_give_up client ADDR PORT READY REQ gives-up|dies
 *     connects, waits for REQ, then destroys its id and exits
 *     ("gives-up") or exits without destroying it ("dies") */
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

static int server(struct addrinfo *ai, char **fifos) {
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
  if (signal_fifo(fifos[1]) || wait_fifo(fifos[2])) return 1;
  struct rdma_conn_param cp = {.qp_num = 0x5678, .responder_resources = 1, .initiator_depth = 1};
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

static int client(struct addrinfo *ai, char **fifos, int destroy) {
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
  if (destroy && rdma_destroy_id(id)) { perror("rdma_destroy_id"); return 1; }
  printf("client %s\n", destroy ? "gave up" : "exits");
  fflush(stdout);
  _exit(0); /* no clean-up: "dies" leaves its id to the exit */
}

int main(int argc, char **argv) {
  int is_server = argc == 7 && !strcmp(argv[1], "server");
  int is_client = argc == 7 && !strcmp(argv[1], "client") &&
                  (!strcmp(argv[6], "gives-up") || !strcmp(argv[6], "dies"));
  if (!is_server && !is_client) {
    fprintf(stderr, "usage: cm_give_up server ADDR PORT READY REQ GONE\n"
                    "       cm_give_up client ADDR PORT READY REQ gives-up|dies\n");
    return 2;
  }
  struct addrinfo *ai;
  if (getaddrinfo(argv[2], argv[3], NULL, &ai)) { fprintf(stderr, "getaddrinfo\n"); return 2; }
  return is_server ? server(ai, argv + 4) : client(ai, argv + 4, !strcmp(argv[6], "gives-up"));
}
