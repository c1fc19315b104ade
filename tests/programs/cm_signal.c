/* Signals while rdma_get_cm_event waits, as the kernel's command takes
 * them: a handler installed without SA_RESTART makes the call return -1
 * with errno EINTR (a server whose SIGINT handler sets a flag stops); one
 * installed with SA_RESTART lets it wait on, and it returns the event
 * that comes after the signals (an address resolved). A thread signals
 * the waiting one every 10 ms; a signal that arrives before the wait
 * begins is only counted. Then commands that talk to softverbs' daemon
 * (bind, listen, destroy) run under a storm of signals without
 * SA_RESTART and all succeed, as the kernel's are not interrupted (an
 * interrupted round trip once failed them with EINTR, and left its reply
 * to fail the next command with EIO). Usage: cm_signal IP. Prints
 * "cm signal ok". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static volatile sig_atomic_t signals;

static void count(int sig) {
  (void)sig;
  signals++;
}

struct poker {
  pthread_t waiter;
  volatile int done;
  int rounds;                /* 0: until the wait ends */
  struct rdma_cm_id *resolve; /* then resolves this id's address, if set */
  const char *ip;
};

static void *poke(void *arg) {
  struct poker *p = arg;
  struct timespec gap = {0, 10 * 1000 * 1000};
  for (int i = 0; !p->done && (p->rounds == 0 || i < p->rounds); i++) {
    pthread_kill(p->waiter, SIGUSR1);
    nanosleep(&gap, NULL);
  }
  if (p->resolve) {
    struct sockaddr_in to = {.sin_family = AF_INET};
    inet_pton(AF_INET, p->ip, &to.sin_addr);
    if (rdma_resolve_addr(p->resolve, NULL, (struct sockaddr *)&to, 2000))
      perror("rdma_resolve_addr");
  }
  return NULL;
}

/* rdma_get_cm_event on `ch` with SIGUSR1 handled under `flags`, while
 * `p` signals; errno as the call left it. */
static int wait_poked(int flags, struct rdma_event_channel *ch, struct poker *p,
                      struct rdma_cm_event **event) {
  struct sigaction sa = {.sa_handler = count, .sa_flags = flags};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  pthread_t t;
  p->waiter = pthread_self();
  if (pthread_create(&t, NULL, poke, p)) return -2;
  errno = 0;
  int r = rdma_get_cm_event(ch, event);
  int e = errno;
  p->done = 1;
  pthread_join(t, NULL);
  errno = e;
  return r;
}

/* 300 ids bound to `ip`, listening and destroyed on `ch`, with SIGALRM
 * (no SA_RESTART) every 20 us meanwhile; 0 if every call succeeded. */
static int commands_in_a_storm(struct rdma_event_channel *ch, const char *ip) {
  struct sigaction sa = {.sa_handler = count};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval storm = {{0, 20}, {0, 20}}, calm = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &storm, NULL);
  struct sockaddr_in addr = {.sin_family = AF_INET};
  inet_pton(AF_INET, ip, &addr.sin_addr);
  int failed = 0;
  for (int i = 0; i < 300 && !failed; i++) {
    struct rdma_cm_id *id;
    const char *step = "rdma_create_id";
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0) {
      step = "rdma_bind_addr";
      if (rdma_bind_addr(id, (struct sockaddr *)&addr) == 0) step = "rdma_listen";
      if (strcmp(step, "rdma_listen") == 0 && rdma_listen(id, 4) == 0) step = "rdma_destroy_id";
      if (rdma_destroy_id(id) == 0 && strcmp(step, "rdma_destroy_id") == 0) continue;
    }
    fprintf(stderr, "under signals, round %d: %s failed: %s\n", i, step, strerror(errno));
    failed = 1;
  }
  setitimer(ITIMER_REAL, &calm, NULL);
  return failed;
}

int main(int argc, char **argv) {
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id;
  struct rdma_cm_event *event;
  if (argc != 2 || !ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
    perror("setup");
    return 1;
  }
  struct poker interrupting = {.rounds = 0};
  int r = wait_poked(0, ch, &interrupting, &event);
  if (r != -1 || errno != EINTR) {
    fprintf(stderr, "without SA_RESTART: returned %d, errno %d (%s); want -1, EINTR\n", r, errno,
            strerror(errno));
    return 1;
  }
  struct poker restarting = {.rounds = 20, .resolve = id, .ip = argv[1]};
  r = wait_poked(SA_RESTART, ch, &restarting, &event);
  if (r) {
    fprintf(stderr, "with SA_RESTART: returned %d, errno %d (%s); want the event\n", r, errno,
            strerror(errno));
    return 1;
  }
  if (event->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
    fprintf(stderr, "with SA_RESTART: event %s, want ADDR_RESOLVED\n", rdma_event_str(event->event));
    return 1;
  }
  rdma_ack_cm_event(event);
  rdma_destroy_id(id);
  if (commands_in_a_storm(ch, argv[1])) return 1;
  rdma_destroy_event_channel(ch);
  printf("cm signal ok (%d signals)\n", (int)signals);
  return 0;
}
