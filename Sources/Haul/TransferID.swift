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
        // Over the strings' own bytes (no copies into arrays): computed for every request, and for every attempt's
        // partial file name.
        var hasher = SHA256()
        var (url, destination) = (url, destination)
        url.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        withUnsafeBytes(of: UInt8(0)) { hasher.update(bufferPointer: $0) }
        destination.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        return TransferID(hasher.finalize().withUnsafeBytes { String(hexOf: $0.prefix(8)) })
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
        self.init(hexOf: Array(bytes))
    }

    /// Lower-case hex of the bytes, written straight into the string's storage.
    init<Bytes: Collection>(hexOf bytes: Bytes) where Bytes.Element == UInt8 {
        self.init(unsafeUninitializedCapacity: bytes.count * 2) { utf8 in
            func digit(_ value: UInt8) -> UInt8 {
                value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
            }
            var index = 0
            for byte in bytes {
                utf8[index] = digit(byte >> 4)
                utf8[index + 1] = digit(byte & 0x0f)
                index += 2
            }
            return index
        }
    }
}
