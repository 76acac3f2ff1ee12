/* thread.h — naming an engine thread, and stopping one that sleeps on a condition variable
 * (writer, feed, trending, recount sampler). */
#ifndef TALLY_ENGINE_THREAD_H
#define TALLY_ENGINE_THREAD_H

#include <pthread.h>
#include <stdbool.h>

#define THREAD_NAME_MAX 15 /* Linux: 16 bytes with the NUL */

/* Names the calling thread (top, ps -L, gdb, /proc/PID/task/TID/comm show it); name is a literal of
 * at most THREAD_NAME_MAX bytes, checked when compiling. */
#define thread_set_name(name)                                                                                          \
    do {                                                                                                               \
        _Static_assert(sizeof(name) - 1 <= THREAD_NAME_MAX, "a thread name is at most 15 bytes");                      \
        pthread_setname_np(pthread_self(), name);                                                                      \
    } while (0)

/* Sets *stopping under lock, wakes the thread and waits for it to end. */
static inline void thread_stop_join(pthread_mutex_t *lock, pthread_cond_t *wake, bool *stopping, pthread_t thread)
{
    pthread_mutex_lock(lock);
    *stopping = true;
    pthread_cond_signal(wake);
    pthread_mutex_unlock(lock);
    pthread_join(thread, NULL);
}

#endif
