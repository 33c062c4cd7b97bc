/* Attributes of the application, ranges of ranks, the split by host and subarrays,
 * by their documented behaviour: a keyval's copy function decides what MPI_Comm_dup
 * hands on (MPI_COMM_DUP_FN the value, MPI_COMM_NULL_COPY_FN nothing, a function of
 * the application whatever it says); its delete function runs when the attribute is
 * replaced, deleted, its communicator freed, and at MPI_Finalize for MPI_COMM_SELF
 * before MPI_COMM_WORLD; a freed keyval keeps the attributes set with it (and may be
 * freed again while they hold it); the MPI-1
 * names do the same. Group_range_incl/excl take {first, last, stride} triplets,
 * strides below zero included. MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) groups the
 * ranks of one host. A subarray of a 3-D array in C and in Fortran order travels
 * element for element. Runs with any number of ranks (1 too). */
#include "check.h"

#include <string.h>

/* What the delete functions saw, in order: the keyval's tag letter per call. */
static char deleted[64];
static int deleted_count = 0;

static int note_delete(MPI_Comm comm, int keyval, void* value, void* extra) {
    (void)comm;
    (void)keyval;
    (void)value;
    if (deleted_count < (int)sizeof deleted - 1) deleted[deleted_count++] = *(const char*)extra;
    deleted[deleted_count] = '\0';
    return MPI_SUCCESS;
}

/* Copies an int attribute as a new int one larger (the application decides). */
static int copy_plus_one(MPI_Comm oldcomm, int keyval, void* extra, void* in, void* out, int* flag) {
    (void)oldcomm;
    (void)keyval;
    (void)extra;
    static int copies[8];
    static int used = 0;
    copies[used] = *(int*)in + 1;
    *(void**)out = &copies[used++];
    *flag = 1;
    return MPI_SUCCESS;
}

static int refusing = 1;
static int refuse_delete(MPI_Comm comm, int keyval, void* value, void* extra) {
    (void)comm;
    (void)keyval;
    (void)value;
    (void)extra;
    return refusing ? MPI_ERR_OTHER : MPI_SUCCESS;
}

static void attributes(void) {
    WHERE("attributes: set, get, dup, delete, free");
    static char tag_a = 'a', tag_b = 'b', tag_c = 'c';
    int ka = MPI_KEYVAL_INVALID, kb = MPI_KEYVAL_INVALID, kc = MPI_KEYVAL_INVALID;
    CHECK(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, note_delete, &ka, &tag_a) == MPI_SUCCESS, "create a");
    CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, note_delete, &kb, &tag_b) == MPI_SUCCESS, "create b");
    CHECK(MPI_Comm_create_keyval(copy_plus_one, note_delete, &kc, &tag_c) == MPI_SUCCESS, "create c");
    CHECK(ka != kb && kb != kc && ka != MPI_KEYVAL_INVALID, "keyvals %d %d %d", ka, kb, kc);

    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    static int va = 10, vb = 20, vc = 30;
    int* got = NULL;
    int flag = -1;
    CHECK(MPI_Comm_get_attr(comm, ka, &got, &flag) == MPI_SUCCESS && flag == 0, "nothing set yet: flag %d", flag);
    MPI_Comm_set_attr(comm, ka, &va);
    MPI_Comm_set_attr(comm, kb, &vb);
    MPI_Comm_set_attr(comm, kc, &vc);
    CHECK(MPI_Comm_get_attr(comm, kb, &got, &flag) == MPI_SUCCESS && flag == 1 && got == &vb, "b is vb");

    /* Setting again deletes the old value first. */
    static int vb2 = 21;
    MPI_Comm_set_attr(comm, kb, &vb2);
    CHECK(strcmp(deleted, "b") == 0, "replacing b called '%s'", deleted);
    MPI_Comm_get_attr(comm, kb, &got, &flag);
    CHECK(flag == 1 && got == &vb2, "b is vb2");

    /* dup: a's value as it is, b not at all, c as its function made it. */
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Comm_dup(comm, &copy);
    MPI_Comm_get_attr(copy, ka, &got, &flag);
    CHECK(flag == 1 && got == &va, "dup: a is the same pointer");
    MPI_Comm_get_attr(copy, kb, &got, &flag);
    CHECK(flag == 0, "dup: b was copied though its copy function is MPI_COMM_NULL_COPY_FN");
    MPI_Comm_get_attr(copy, kc, &got, &flag);
    CHECK(flag == 1 && got != &vc && *got == 31, "dup: c is %d", flag ? *got : -1);

    /* Delete one, then free the keyval while an attribute still uses it: it stays
     * readable where it is set, and its delete function runs when that goes. */
    deleted_count = 0;
    MPI_Comm_delete_attr(comm, ka);
    CHECK(strcmp(deleted, "a") == 0, "delete a called '%s'", deleted);
    MPI_Comm_get_attr(comm, ka, &got, &flag);
    CHECK(flag == 0, "a still set after delete");
    int kc_handle = kc;
    CHECK(MPI_Comm_free_keyval(&kc) == MPI_SUCCESS && kc == MPI_KEYVAL_INVALID, "free c");
    MPI_Comm_get_attr(comm, kc_handle, &got, &flag); /* a freed keyval still reads what it set */
    CHECK(flag == 1 && got == &vc, "the freed keyval's attribute is gone");
    /* Freed again through another copy of its handle while attributes hold it:
     * accepted (each attribute keeps a reference); once none does, "was freed". */
    int kc_again = kc_handle;
    CHECK(MPI_Comm_free_keyval(&kc_again) == MPI_SUCCESS && kc_again == MPI_KEYVAL_INVALID,
          "a second free while attributes hold the keyval");
    deleted_count = 0;
    MPI_Comm_free(&comm); /* deletes b and c: both functions run */
    CHECK(deleted_count == 2 && strchr(deleted, 'b') && strchr(deleted, 'c'), "freeing comm called '%s'", deleted);
    deleted_count = 0;
    MPI_Comm_free(&copy); /* a and c */
    CHECK(deleted_count == 2 && strchr(deleted, 'a') && strchr(deleted, 'c'), "freeing copy called '%s'", deleted);

    WHERE("attributes: errors");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect_error(MPI_Comm_set_attr(MPI_COMM_WORLD, kc_handle, &va), MPI_ERR_KEYVAL, "was freed");
    kc_again = kc_handle;
    expect_error(MPI_Comm_free_keyval(&kc_again), MPI_ERR_KEYVAL, "was freed");
    expect_error(MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_TAG_UB, &va), MPI_ERR_KEYVAL, "predefined");
    expect_error(MPI_Comm_delete_attr(MPI_COMM_WORLD, ka), MPI_ERR_KEYVAL, "has no attribute");
    int kr = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, refuse_delete, &kr, NULL);
    MPI_Comm_set_attr(MPI_COMM_WORLD, kr, &va);
    expect_error(MPI_Comm_delete_attr(MPI_COMM_WORLD, kr), MPI_ERR_OTHER, "delete function");
    MPI_Comm_get_attr(MPI_COMM_WORLD, kr, &got, &flag);
    CHECK(flag == 1 && got == &va, "a refused delete removed the attribute");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    refusing = 0;
    CHECK(MPI_Comm_delete_attr(MPI_COMM_WORLD, kr) == MPI_SUCCESS, "delete once the function lets go");
    MPI_Comm_free_keyval(&kr);
    MPI_Comm_free_keyval(&ka);
    MPI_Comm_free_keyval(&kb);

    WHERE("attributes: the MPI-1 names");
    int k1 = MPI_KEYVAL_INVALID;
    static char tag_1 = '1';
    CHECK(MPI_Keyval_create(MPI_DUP_FN, note_delete, &k1, &tag_1) == MPI_SUCCESS, "Keyval_create");
    MPI_Comm one = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &one);
    MPI_Attr_put(one, k1, &va);
    MPI_Attr_get(one, k1, &got, &flag);
    CHECK(flag == 1 && got == &va, "Attr_get");
    deleted_count = 0;
    MPI_Attr_delete(one, k1);
    CHECK(strcmp(deleted, "1") == 0, "Attr_delete called '%s'", deleted);
    MPI_Keyval_free(&k1);
    CHECK(k1 == MPI_KEYVAL_INVALID, "Keyval_free");
    MPI_Comm_free(&one);
}

static void ranges(int size) {
    WHERE("groups: range_incl and range_excl");
    MPI_Group world = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    /* Every second rank from the last down to 0, then rank 0 if it was not in. */
    int down[1][3] = {{size - 1, 0, -2}};
    MPI_Group g = MPI_GROUP_NULL;
    CHECK(MPI_Group_range_incl(world, 1, down, &g) == MPI_SUCCESS, "range_incl");
    int n = -1;
    MPI_Group_size(g, &n);
    CHECK(n == (size + 1) / 2, "range_incl: %d members of %d", n, size);
    for (int i = 0; i < n; ++i) {
        int w = -1;
        MPI_Group_translate_ranks(g, 1, &i, world, &w);
        CHECK(w == size - 1 - 2 * i, "range_incl: member %d is world rank %d", i, w);
    }
    MPI_Group rest = MPI_GROUP_NULL;
    CHECK(MPI_Group_range_excl(world, 1, down, &rest) == MPI_SUCCESS, "range_excl");
    int m = -1;
    MPI_Group_size(rest, &m);
    CHECK(m == size - n, "range_excl: %d members", m);
    for (int i = 0; i < m; ++i) {
        int w = -1;
        MPI_Group_translate_ranks(rest, 1, &i, world, &w);
        CHECK((size - 1 - w) % 2 == 1, "range_excl kept world rank %d", w);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int zero[1][3] = {{0, 0, 0}};
    MPI_Group bad = MPI_GROUP_NULL;
    expect_error(MPI_Group_range_incl(world, 1, zero, &bad), MPI_ERR_ARG, "stride 0");
    int beyond[1][3] = {{0, size, 1}};
    expect_error(MPI_Group_range_incl(world, 1, beyond, &bad), MPI_ERR_RANK, "not within the group");
    int twice[2][3] = {{0, 0, 1}, {0, 0, 1}};
    expect_error(MPI_Group_range_excl(world, 2, twice, &bad), MPI_ERR_RANK, "given twice");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Group_free(&g);
    MPI_Group_free(&rest);
    MPI_Group_free(&world);
}

static void split_type(int rank, int size) {
    WHERE("communicators: split_type by host");
    MPI_Comm node = MPI_COMM_NULL;
    /* Reverse the order by key: the new ranks count down. */
    CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, size - rank, MPI_INFO_NULL, &node) == MPI_SUCCESS,
          "split_type");
    int r = -1, s = -1;
    MPI_Comm_rank(node, &r);
    MPI_Comm_size(node, &s);
    CHECK(s == size && r == size - 1 - rank, "every rank runs on this host: rank %d of %d", r, s);
    MPI_Comm_free(&node);
    WHERE("communicators: idup");
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &copy, &req) == MPI_SUCCESS, "idup");
    CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS && req == MPI_REQUEST_NULL, "wait for idup");
    int result = -1;
    MPI_Comm_compare(MPI_COMM_WORLD, copy, &result);
    CHECK(result == MPI_CONGRUENT, "idup gave %d", result);
    int total = 0;
    MPI_Allreduce(&rank, &total, 1, MPI_INT, MPI_SUM, copy);
    CHECK(total == size * (size - 1) / 2, "allreduce on the idup: %d", total);
    MPI_Comm_free(&copy);

    WHERE("communicators: idup does not block: rank 0 takes rank 1's synchronous send before rank 1 joins it");
    /* Rank 1 joins the idup only after its MPI_Ssend was received, and rank 0 receives
     * it only after starting the idup: an idup that waited for every member here would
     * never return. A collective on the world in between keeps its own order. */
    if (size >= 2 && rank <= 1) {
        int token = 0;
        if (rank == 0) {
            CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &copy, &req) == MPI_SUCCESS, "idup before the receive");
            MPI_Recv(&token, 1, MPI_INT, 1, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK(token == 61, "token %d", token);
        } else {
            token = 61;
            MPI_Ssend(&token, 1, MPI_INT, 0, 61, MPI_COMM_WORLD);
            CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &copy, &req) == MPI_SUCCESS, "idup after the synchronous send");
        }
    } else {
        CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &copy, &req) == MPI_SUCCESS, "idup");
    }
    MPI_Request barrier = MPI_REQUEST_NULL;
    MPI_Ibarrier(MPI_COMM_WORLD, &barrier);
    MPI_Request both[2] = {req, barrier};
    CHECK(MPI_Waitall(2, both, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "the idup and a barrier after it");
    MPI_Comm second = MPI_COMM_NULL;
    MPI_Comm_dup(copy, &second); /* a communicator made after it agrees on contexts of its own */
    total = 0;
    MPI_Allreduce(&rank, &total, 1, MPI_INT, MPI_SUM, copy);
    CHECK(total == size * (size - 1) / 2, "allreduce on the non-blocking idup: %d", total);
    int ring = rank;
    MPI_Sendrecv_replace(&ring, 1, MPI_INT, (rank + 1) % size, 0, (rank + size - 1) % size, 0, second,
                         MPI_STATUS_IGNORE);
    CHECK(ring == (rank + size - 1) % size, "a ring on the dup of the idup: %d", ring);
    MPI_Comm_free(&second);
    MPI_Comm_free(&copy);
    CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS &&
              node == MPI_COMM_NULL,
          "MPI_UNDEFINED gives MPI_COMM_NULL");
}

/* Element (i, j, k) of a 4 x 5 x 6 array, stored in the given order. */
static int at(int order, int i, int j, int k) {
    return order == MPI_ORDER_C ? (i * 5 + j) * 6 + k : (k * 5 + j) * 4 + i;
}

static void subarrays(int rank, int size) {
    int orders[2] = {MPI_ORDER_C, MPI_ORDER_FORTRAN};
    for (int o = 0; o < 2; ++o) {
        const int order = orders[o];
        WHERE("subarray: order %s", order == MPI_ORDER_C ? "C" : "Fortran");
        int sizes[3] = {4, 5, 6};
        int subsizes[3] = {2, 3, 2};
        int starts[3] = {1, 2, 3};
        MPI_Datatype sub = MPI_DATATYPE_NULL;
        CHECK(MPI_Type_create_subarray(3, sizes, subsizes, starts, order, MPI_INT, &sub) == MPI_SUCCESS, "create");
        MPI_Type_commit(&sub);
        int tsize = -1;
        MPI_Aint lb = -1, extent = -1;
        MPI_Type_size(sub, &tsize);
        MPI_Type_get_extent(sub, &lb, &extent);
        CHECK(tsize == 2 * 3 * 2 * (int)sizeof(int), "size %d", tsize);
        CHECK(lb == 0 && extent == 4 * 5 * 6 * (MPI_Aint)sizeof(int), "lb %ld extent %ld", (long)lb, (long)extent);

        int array[120];
        for (int x = 0; x < 120; ++x)
            array[x] = rank * 1000 + x;
        int packed[12];
        int position = 0;
        MPI_Pack(array, 1, sub, packed, (int)sizeof packed, &position, MPI_COMM_WORLD);
        CHECK(position == (int)sizeof packed, "packed %d bytes", position);
        int e = 0;
        /* The block's elements in the array's memory order. */
        for (int x = 0; x < 120; ++x) {
            int i, j, k;
            if (order == MPI_ORDER_C) {
                i = x / 30, j = (x / 6) % 5, k = x % 6;
            } else {
                i = x % 4, j = (x / 4) % 5, k = x / 20;
            }
            if (i >= 1 && i < 3 && j >= 2 && j < 5 && k >= 3 && k < 5) {
                CHECK(packed[e] == array[at(order, i, j, k)], "element %d is %d", e, packed[e]);
                ++e;
            }
        }
        CHECK(e == 12, "%d elements in the block", e);

        /* Sent as the subarray to the next rank, received there into the same block
         * of a zeroed array: the block holds the sender's values, the rest stays 0. */
        const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
        int received[120];
        memset(received, 0, sizeof received);
        MPI_Sendrecv(array, 1, sub, next, 9, received, 1, sub, prev, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        int in_block = 0;
        for (int x = 0; x < 120; ++x) {
            const int expected = prev * 1000 + x;
            if (received[x] != 0) {
                CHECK(received[x] == expected, "received[%d] = %d, expected %d", x, received[x], expected);
                ++in_block;
            }
        }
        CHECK(in_block == 12, "%d elements arrived", in_block);
        MPI_Type_free(&sub);
    }
    WHERE("subarray: errors");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int sizes[2] = {4, 4}, subsizes[2] = {2, 2}, bad_starts[2] = {0, 3}, starts[2] = {0, 0};
    MPI_Datatype t = MPI_DATATYPE_NULL;
    expect_error(MPI_Type_create_subarray(2, sizes, subsizes, bad_starts, MPI_ORDER_C, MPI_INT, &t), MPI_ERR_ARG,
                 "outside the size");
    expect_error(MPI_Type_create_subarray(2, sizes, subsizes, starts, 99, MPI_INT, &t), MPI_ERR_ARG,
                 "neither MPI_ORDER_C nor MPI_ORDER_FORTRAN");
    expect_error(MPI_Type_create_subarray(0, sizes, subsizes, starts, MPI_ORDER_C, MPI_INT, &t), MPI_ERR_ARG,
                 "not positive");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* Attributes of datatypes: MPI_Type_dup hands them on as the copy function says, the
 * delete function runs when one is replaced, deleted or its type freed; a type keyval
 * is refused on a communicator and a communicator's on a type. */
static void type_attributes(void) {
    WHERE("attributes: of datatypes");
    static char tag_a = 'a', tag_b = 'b';
    int ka = MPI_KEYVAL_INVALID;
    int kb = MPI_KEYVAL_INVALID;
    CHECK(MPI_Type_create_keyval(copy_plus_one, note_delete, &ka, &tag_a) == MPI_SUCCESS, "type keyval a");
    CHECK(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, note_delete, &kb, &tag_b) == MPI_SUCCESS, "type keyval b");
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    static int one = 1, two = 2;
    deleted_count = 0;
    deleted[0] = '\0';
    CHECK(MPI_Type_set_attr(pair, ka, &one) == MPI_SUCCESS, "set a");
    CHECK(MPI_Type_set_attr(pair, kb, &two) == MPI_SUCCESS, "set b");
    int* got = NULL;
    int flag = 0;
    CHECK(MPI_Type_get_attr(pair, ka, &got, &flag) == MPI_SUCCESS && flag == 1 && got == &one, "get a");
    MPI_Datatype copy;
    CHECK(MPI_Type_dup(pair, &copy) == MPI_SUCCESS, "dup");
    CHECK(MPI_Type_get_attr(copy, ka, &got, &flag) == MPI_SUCCESS && flag == 1 && *got == 2,
          "the copy function's value on the duplicate: %d", flag ? *got : -1);
    CHECK(MPI_Type_get_attr(copy, kb, &got, &flag) == MPI_SUCCESS && flag == 0, "MPI_TYPE_NULL_COPY_FN copies nothing");
    CHECK(MPI_Type_set_attr(pair, kb, &one) == MPI_SUCCESS && strcmp(deleted, "b") == 0,
          "replacing calls the delete function: '%s'", deleted);
    CHECK(MPI_Type_delete_attr(pair, kb) == MPI_SUCCESS && strcmp(deleted, "bb") == 0, "delete: '%s'", deleted);
    CHECK(MPI_Type_get_attr(pair, kb, &got, &flag) == MPI_SUCCESS && flag == 0, "deleted");
    CHECK(MPI_Type_free(&pair) == MPI_SUCCESS && strcmp(deleted, "bba") == 0, "freeing the type deletes: '%s'",
          deleted);
    CHECK(MPI_Type_get_attr(MPI_INT, ka, &got, &flag) == MPI_SUCCESS && flag == 0, "a predefined type has none");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect_error(MPI_Comm_set_attr(MPI_COMM_WORLD, ka, &one), MPI_ERR_KEYVAL, "not created by MPI_Comm_create_keyval");
    int kc = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &kc, NULL);
    expect_error(MPI_Type_set_attr(copy, kc, &one), MPI_ERR_KEYVAL, "not created by MPI_Type_create_keyval");
    expect_error(MPI_Type_delete_attr(copy, kb), MPI_ERR_KEYVAL, "datatype");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    CHECK(MPI_Type_free_keyval(&ka) == MPI_SUCCESS && ka == MPI_KEYVAL_INVALID, "free keyval");
    CHECK(MPI_Type_free(&copy) == MPI_SUCCESS && strcmp(deleted, "bbaa") == 0,
          "a freed keyval's attribute is deleted with its type: '%s'", deleted);
    MPI_Type_free_keyval(&kb);
    MPI_Comm_free_keyval(&kc);
}

int main(int argc, char** argv) {
    CHECK(MPI_Init(&argc, &argv) == MPI_SUCCESS, "init");
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(240, rank);

    attributes();
    type_attributes();
    ranges(size);
    split_type(rank, size);
    subarrays(rank, size);

    WHERE("finalize: the attributes of MPI_COMM_SELF go first, the last set first, then MPI_COMM_WORLD's");
    static char tag_s = 's', tag_t = 't', tag_w = 'w';
    int ks = MPI_KEYVAL_INVALID, kt = MPI_KEYVAL_INVALID, kw = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, note_delete, &kw, &tag_w);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, note_delete, &kt, &tag_t);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, note_delete, &ks, &tag_s);
    static int v = 1;
    MPI_Comm_set_attr(MPI_COMM_WORLD, kw, &v);
    MPI_Comm_set_attr(MPI_COMM_SELF, ks, &v); /* set first, deleted last */
    MPI_Comm_set_attr(MPI_COMM_SELF, kt, &v);
    deleted_count = 0;
    deleted[0] = '\0';
    CHECK(MPI_Finalize() == MPI_SUCCESS, "finalize");
    if (strcmp(deleted, "tsw") != 0) {
        fprintf(stderr, "rank %d: MPI_Finalize called the delete functions '%s', expected 't', 's' then 'w'\n", rank,
                deleted);
        return 3;
    }
    return 0;
}
