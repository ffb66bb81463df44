import CHaulSystem

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A value behind a mutex whose contended lock spins for a while before its thread sleeps in the kernel: glibc's
/// adaptive mutex on Linux, a default mutex elsewhere. For a lock taken very often for a few microseconds at a time
/// by a few threads, where sleeping and being woken costs more than the wait (``TransferManager``'s state).
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
        pthread_mutex_lock(self.mutex)
        defer { pthread_mutex_unlock(self.mutex) }
        return try body(&self.value.pointee)
    }
}

// The value is only reached through `withLockedValue`, with the mutex held.
extension SpinningLockedBox: @unchecked Sendable where Value: Sendable {}
