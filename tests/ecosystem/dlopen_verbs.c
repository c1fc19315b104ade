/* A program that loads libibverbs the way NCCL's, RCCL's and
 * rdma-mummy-sys's wrappers do: dlopen("libibverbs.so.1") and dlsym on
 * that handle, never linking it. It must find the device named on its
 * command line, open it, read port 1's state and GID 1, and move data
 * between two RC QPs of that device (a SEND and an RDMA WRITE, bytes
 * checked). Prints "dlopen verbs ok" on success. */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOOK(name) look(h, #name)
static void *look(void *h, const char *name) {
  void *f = dlsym(h, name);
  if (!f) { fprintf(stderr, "dlsym %s: %s\n", name, dlerror()); exit(1); }
  return f;
}
static void die(const char *what) { perror(what); exit(1); }

static void *h;
static struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
static int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
    .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  if (modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest;
  a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64; a.ah_attr.port_num = 1;
  if (modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("modify RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 1;
  if (modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify RTS");
}

static void wait_wc(struct ibv_cq *cq, int n) {
  struct ibv_wc wc;
  while (n > 0) {
    int got = ibv_poll_cq(cq, 1, &wc); /* inline: the provider's poll_cq */
    if (got < 0) die("poll");
    if (got && wc.status != IBV_WC_SUCCESS) { fprintf(stderr, "wc status %d\n", wc.status); exit(1); }
    n -= got;
  }
}

int main(int argc, char **argv) {
  const char *want = argc > 1 ? argv[1] : "softverbs0";
  h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  struct ibv_device **(*get_list)(int *) = LOOK(ibv_get_device_list);
  const char *(*dev_name)(struct ibv_device *) = LOOK(ibv_get_device_name);
  struct ibv_context *(*open_dev)(struct ibv_device *) = LOOK(ibv_open_device);
  int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *) = LOOK(ibv_query_gid);
  int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *) = LOOK(ibv_query_port);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *) = LOOK(ibv_alloc_pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int) = LOOK(ibv_reg_mr);
  struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, void *, int) = LOOK(ibv_create_cq);
  create_qp = LOOK(ibv_create_qp);
  modify_qp = LOOK(ibv_modify_qp);

  int n; struct ibv_device **list = get_list(&n);
  struct ibv_device *dev = NULL;
  for (int i = 0; list && i < n; i++) {
    printf("device %s\n", dev_name(list[i]));
    if (!strcmp(dev_name(list[i]), want)) dev = list[i];
  }
  if (!dev) { fprintf(stderr, "%s is not in libibverbs' own list\n", want); return 1; }
  struct ibv_context *ctx = open_dev(dev);
  if (!ctx) die("ibv_open_device");
  struct ibv_port_attr port;
  if (query_port(ctx, 1, &port) || port.state != IBV_PORT_ACTIVE) { fprintf(stderr, "port not active\n"); return 1; }
  union ibv_gid gid;
  if (query_gid(ctx, 1, 1, &gid)) die("ibv_query_gid");
  struct ibv_pd *pd = alloc_pd(ctx);
  enum { LEN = 65536 };
  char *buf = calloc(4, LEN);
  struct ibv_mr *mr = reg_mr(pd, buf, 4 * LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct ibv_cq *cq = create_cq(ctx, 16, NULL, NULL, 0);
  if (!pd || !mr || !cq) die("pd/mr/cq");
  struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
    .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *a = create_qp(pd, &init), *b = create_qp(pd, &init);
  if (!a || !b) die("ibv_create_qp");
  connect_qp(a, b->qp_num, gid);
  connect_qp(b, a->qp_num, gid);
  for (int i = 0; i < LEN; i++) buf[i] = (char)(i * 13 + 1);
  struct ibv_sge rs = {.addr = (uintptr_t)(buf + LEN), .length = LEN, .lkey = mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *bad_r;
  if (ibv_post_recv(b, &rwr, &bad_r)) die("post_recv");
  struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = LEN, .lkey = mr->lkey};
  struct ibv_send_wr s = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
    .send_flags = IBV_SEND_SIGNALED}, *bad_s;
  if (ibv_post_send(a, &s, &bad_s)) die("post_send");
  wait_wc(cq, 2);
  struct ibv_send_wr w = s;
  w.wr_id = 3; w.opcode = IBV_WR_RDMA_WRITE;
  w.wr.rdma.remote_addr = (uintptr_t)(buf + 2 * LEN); w.wr.rdma.rkey = mr->rkey;
  if (ibv_post_send(a, &w, &bad_s)) die("post_send write");
  wait_wc(cq, 1);
  if (memcmp(buf, buf + LEN, LEN) || memcmp(buf, buf + 2 * LEN, LEN)) {
    fprintf(stderr, "data differs\n");
    return 1;
  }
  printf("dlopen verbs ok\n");
  return 0;
}
