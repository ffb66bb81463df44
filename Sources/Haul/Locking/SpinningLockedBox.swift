import CHaulSystem

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A value behind a mutex whose contended lock spins for a while before its thread sleeps in the kernel
/// (`haul_mutex_lock_spinning`: up to 1,000 pauses on glibc; a default mutex elsewhere). For a lock taken very often
/// for a few microseconds at a time by a few threads, where sleeping and being woken costs more than the wait
/// (``TransferManager``'s state).
///
/// glibc's adaptive mutex alone spins at most 100 pauses, which the manager's lock outlasted: on 2,000 small files
/// with a store, the two event loops, finishing files in bursts as the store's commits come back, slept on it and woke
/// each other: 1,955 `futex` calls a run on it (1,186 wakes, 769 waits), of 2,467 in all. Spinning up to 1,000
/// pauses: 822 in all, context switches 1,964 → 1,240, wall time 0.879 of before (16 rounds, tmpfs; 0.861 without
/// the store).
final class SpinningLockedBox<Value> {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// Behind a pointer rather than a stored `var`: a class's stored property passed `inout` is checked for
    /// exclusive access at run time on every call; the mutex already guarantees it.
    private let value: UnsafeMutablePointer<Value>

    init(_ value: Value) {
        self.mutex = UnsafeMutablePointer.allocate(capacity: 1)
        let result = haul_mutex_init_spinning(self.mutex)
        precondition(result == 0, "pthread_mutex_init failed: \(result)")
        self.value = UnsafeMutablePointer.allocate(capacity: 1)
        self.value.initialize(to: value)
    }

    deinit {
        self.value.deinitialize(count: 1)
        self.value.deallocate()
        pthread_mutex_destroy(self.mutex)
        self.mutex.deallocate()
    }

    /// Runs `body` with the value, the mutex held.
    func withLockedValue<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        haul_mutex_lock_spinning(self.mutex)
        defer { pthread_mutex_unlock(self.mutex) }
        return try body(&self.value.pointee)
    }
}

// The value is only reached through `withLockedValue`, with the mutex held.
extension SpinningLockedBox: @unchecked Sendable where Value: Sendable {}
