/* pthread_cancel and rdma_get_cm_event, as on the kernel, whose command
 * is a write(2), a cancellation point: a thread blocked in the call ends
 * there (its cleanup handlers run; the process once aborted with
 * "exception not rethrown"), and a thread cancelled before it calls ends
 * on entry, leaving a queued event to the others. The channel serves on
 * afterwards. Usage: cm_cancel IP. Prints "cm cancel ok". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static struct rdma_event_channel *channel;
static volatile pid_t waiter_tid;
static volatile int cleaned_up;
static volatile int returned;

static void cleanup(void *arg) {
  (void)arg;
  cleaned_up = 1;
}

/* Waits for an event; `self` cancels itself first. */
static void *waiter(void *self) {
  struct rdma_cm_event *event;
  pthread_cleanup_push(cleanup, NULL);
  waiter_tid = syscall(SYS_gettid);
  if (self)
    pthread_cancel(pthread_self());
  if (rdma_get_cm_event(channel, &event) == 0)
    rdma_ack_cm_event(event);
  returned = 1;
  pthread_cleanup_pop(0);
  return NULL;
}

/* Whether thread `tid` of this process sleeps (in the kernel). */
static int sleeping(pid_t tid) {
  char path[64], stat[256];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = 0;
  char *end = strrchr(stat, ')');
  return end && end[1] == ' ' && end[2] == 'S';
}

/* Runs a waiter and cancels it; 0 if it ended cancelled, cleanup run. */
static int cancel_waiter(int self) {
  pthread_t t;
  void *result;
  waiter_tid = 0;
  cleaned_up = returned = 0;
  if (pthread_create(&t, NULL, waiter, self ? (void *)1 : NULL))
    return -1;
  if (!self) {
    /* Blocked in the call: asleep in the kernel (the wait), for 2 s. */
    struct timespec tick = {0, 1000 * 1000};
    int i;
    for (i = 0; i < 2000 && !(waiter_tid && sleeping(waiter_tid)); i++)
      nanosleep(&tick, NULL);
    pthread_cancel(t);
  }
  pthread_join(t, &result);
  if (result != PTHREAD_CANCELED || !cleaned_up || returned) {
    fprintf(stderr, "%s: result %p, cleanup %d, returned %d\n",
            self ? "cancelled before the call" : "cancelled in the call", result,
            cleaned_up, returned);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  struct rdma_cm_id *id;
  struct rdma_cm_event *event;
  struct sockaddr_in addr = {.sin_family = AF_INET};
  if (argc < 2 || inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
    fprintf(stderr, "usage: cm_cancel IP\n");
    return 2;
  }
  channel = rdma_create_event_channel();
  if (!channel) {
    perror("rdma_create_event_channel");
    return 1;
  }
  if (cancel_waiter(0))
    return 1;
  /* An event queued for the channel: an address resolved. */
  if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP) ||
      rdma_resolve_addr(id, NULL, (struct sockaddr *)&addr, 2000)) {
    perror("rdma_create_id/rdma_resolve_addr");
    return 1;
  }
  if (cancel_waiter(1))
    return 1;
  /* The event is still there, and the channel serves. */
  if (rdma_get_cm_event(channel, &event)) {
    perror("rdma_get_cm_event");
    return 1;
  }
  if (event->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
    fprintf(stderr, "event %s, not ADDR_RESOLVED\n", rdma_event_str(event->event));
    return 1;
  }
  rdma_ack_cm_event(event);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(channel);
  printf("cm cancel ok\n");
  return 0;
}
