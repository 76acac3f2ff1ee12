/* thread.h — stopping an engine thread that sleeps on a condition variable (writer, feed,
 * trending, recount sampler). */
#ifndef TALLY_ENGINE_THREAD_H
#define TALLY_ENGINE_THREAD_H

#include <pthread.h>
#include <stdbool.h>

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
