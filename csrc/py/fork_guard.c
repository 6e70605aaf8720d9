/* fork_guard.c - no kernel runs while the process forks (see ct_py.h).
 *
 * A read-write lock: each kernel call holds it shared; a pthread_atfork
 * prepare handler takes it exclusively, so fork() waits for the calls in
 * flight to end and new ones wait until the fork is done.  Our handler is
 * registered when the module initialises, after OpenBLAS (loaded with the
 * extension) registered its own; prepare handlers run in reverse order of
 * registration, so ours runs first and OpenBLAS's pre-fork handler then
 * finds its worker threads idle.  The parent releases the lock after the
 * fork; the child, where only the forking thread exists, starts with a new
 * unlocked one.  Writers are preferred (glibc), so a thread calling kernels
 * in a loop cannot starve a fork. */
#include "ct_py.h"

#include <pthread.h>

static pthread_rwlock_t guard = PTHREAD_RWLOCK_INITIALIZER;

static void init_guard(void)
{
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
#ifdef __GLIBC__
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    pthread_rwlock_init(&guard, &attr);
    pthread_rwlockattr_destroy(&attr);
}

void ct_fork_guard_enter(void) { pthread_rwlock_rdlock(&guard); }

void ct_fork_guard_leave(void) { pthread_rwlock_unlock(&guard); }

static void before_fork(void) { pthread_rwlock_wrlock(&guard); }

static void after_fork_parent(void) { pthread_rwlock_unlock(&guard); }

static void after_fork_child(void) { init_guard(); }

int ct_fork_guard_install(void)
{
    static int installed = 0;
    if (installed) return 0;
    init_guard();
    if (pthread_atfork(before_fork, after_fork_parent, after_fork_child) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "ctransformer: pthread_atfork failed");
        return -1;
    }
    installed = 1;
    return 0;
}
