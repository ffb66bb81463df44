import Crypto
import Foundation

/// SHA-256 for test expectations.
struct SHA256Hasher {
    private var hasher = SHA256()
    mutating func update(_ bytes: [UInt8]) { self.hasher.update(data: bytes) }
    var hex: String { self.hasher.finalize().map { String(format: "%02x", $0) }.joined() }
}
