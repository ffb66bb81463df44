import Crypto

/// The identifier of one transfer, unique within a manager.
///
/// Callers may choose it (HWIFileDownload's identifiers); otherwise it is derived from the URL and the destination,
/// so submitting the same URL to the same destination twice names the same transfer (and joins it).
public struct TransferID: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral, Codable {
    /// The identifier's text.
    public var rawValue: String

    /// Creates an identifier from a caller-chosen string.
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public init(stringLiteral value: String) { self.rawValue = value }

    /// The identifier Haul derives for a URL and a destination: 16 hex digits of their SHA-256.
    public static func derived(url: String, destination: String) -> TransferID {
        var hasher = SHA256()
        hasher.update(data: Array(url.utf8))
        hasher.update(data: [0])
        hasher.update(data: Array(destination.utf8))
        return TransferID(String(hexOf: hasher.finalize().prefix(8)))
    }

    public var description: String { self.rawValue }

    public init(from decoder: any Decoder) throws {
        self.rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(self.rawValue)
    }
}

/// The identifier of one batch, unique within a manager.
public struct BatchID: Hashable, Sendable, CustomStringConvertible {
    /// The batch's sequence number in its manager, from 1.
    public var rawValue: Int
    /// Creates an identifier.
    public init(_ rawValue: Int) { self.rawValue = rawValue }
    public var description: String { String(self.rawValue) }
}

extension String {
    /// Lower-case hex of the bytes.
    init<Bytes: Sequence>(hexOf bytes: Bytes) where Bytes.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var utf8: [UInt8] = []
        for byte in bytes {
            utf8.append(digits[Int(byte >> 4)])
            utf8.append(digits[Int(byte & 0x0f)])
        }
        self = String(decoding: utf8, as: UTF8.self)
    }
}
