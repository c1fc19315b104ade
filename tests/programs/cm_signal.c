/* Signals while rdma_get_cm_event waits, as the kernel's command takes
 * them: a handler installed without SA_RESTART makes the call return -1
 * with errno EINTR (a server whose SIGINT handler sets a flag stops); one
 * installed with SA_RESTART lets it wait on, and it returns the event
 * that comes after the signals (an address resolved). A thread signals
 * the waiting one every 10 ms; a signal that arrives before the wait
 * begins is only counted. Usage: cm_signal IP. Prints "cm signal ok". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
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
  rdma_destroy_event_channel(ch);
  printf("cm signal ok (%d signals)\n", (int)signals);
  return 0;
}
