import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Names in leases: `host/pid/uuid`, so that a claimer on the same host can tell a dead holder (a process killed
/// with `kill -9`) from a live one, and two managers in one process still differ.
enum LeaseOwner {
    /// The owners in this process whose managers are still running (``register(_:)``).
    private static let running = NIOLockedValueBox<Set<String>>([])

    static func current() -> String {
        "\(self.hostName())/\(getpid())/\(UUID().uuidString)"
    }

    /// Marks an owner of this process as running, until ``unregister(_:)``: only then are its leases respected by
    /// other managers of the same process.
    static func register(_ owner: String) {
        _ = self.running.withLockedValue { $0.insert(owner) }
    }

    /// Marks an owner of this process as gone (its manager has ended): its leases are free at once.
    static func unregister(_ owner: String) {
        _ = self.running.withLockedValue { $0.remove(owner) }
    }

    /// Whether the holder of a lease may still be alive: `false` for a holder on this host whose process no longer
    /// exists, and for a manager of this process that has ended (a completion recorded before its rename keeps its
    /// lease until then). Holders on other hosts (a shared file system) are trusted until the lease expires.
    static func isAlive(_ owner: String) -> Bool {
        let parts = owner.split(separator: "/")
        guard parts.count == 3, String(parts[0]) == self.hostName(), let pid = Int32(parts[1]) else { return true }
        if pid == getpid() { return self.running.withLockedValue { $0.contains(owner) } }
        return kill(pid, 0) == 0 || errno == EPERM
    }

    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "localhost" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
