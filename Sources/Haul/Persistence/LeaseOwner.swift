import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Names in leases: `host/pid/uuid`, so that a claimer on the same host can tell a dead holder (a process killed
/// with `kill -9`) from a live one, and two managers in one process still differ.
enum LeaseOwner {
    static func current() -> String {
        "\(self.hostName())/\(getpid())/\(UUID().uuidString)"
    }

    /// Whether the process that holds a lease may still be alive: `false` only for a holder on this host whose
    /// process no longer exists. Holders on other hosts (a shared file system) are trusted until the lease expires.
    static func isAlive(_ owner: String) -> Bool {
        let parts = owner.split(separator: "/")
        guard parts.count == 3, String(parts[0]) == self.hostName(), let pid = Int32(parts[1]) else { return true }
        if pid == getpid() { return true }
        return kill(pid, 0) == 0 || errno == EPERM
    }

    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "localhost" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
