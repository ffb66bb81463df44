import Crypto

/// The identifier of one transfer, unique within a manager.
///
/// Callers may choose it (HWIFileDownload's identifiers); otherwise it is derived from the URL and the destination,
/// so submitting the same URL to the same destination twice names the same transfer (and joins it).
public struct TransferID: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral, Codable {
    /// How the identifier is held. Sixteen lower-case hex digits (every derived identifier, and any chosen one of that
    /// form) are kept as the number they spell: hashing, comparing and copying it then touch no string (sixteen bytes
    /// are one more than Swift keeps inside a string value, so each copy of such a string is a reference to count, and
    /// each hash reads it through a pointer). Other text is kept as it is. A text has one form only, so identifiers
    /// with equal texts are equal, and hash alike.
    private enum Storage: Hashable, Sendable {
        case hex(UInt64)
        case text(String)
    }

    private var storage: Storage

    /// The identifier's text.
    public var rawValue: String {
        get {
            switch self.storage {
            case .hex(let value): withUnsafeBytes(of: value.bigEndian) { String(hexOf: $0) }
            case .text(let text): text
            }
        }
        set { self.storage = Self.storage(of: newValue) }
    }

    /// Creates an identifier from a caller-chosen string.
    public init(_ rawValue: String) { self.storage = Self.storage(of: rawValue) }

    public init(stringLiteral value: String) { self.init(value) }

    private init(hex value: UInt64) { self.storage = .hex(value) }

    /// The identifier Haul derives for a URL and a destination: 16 hex digits of their SHA-256.
    public static func derived(url: String, destination: String) -> TransferID {
        // Over the strings' own bytes (no copies into arrays): computed for every request, and for every attempt's
        // partial file name.
        var (url, destination) = (url, destination)
        return url.withUTF8 { url in
            destination.withUTF8 { Self.derived(UnsafeRawBufferPointer(url), UnsafeRawBufferPointer($0)) }
        }
    }

    /// The identifier derived from this one's text as if it were a URL with an empty destination
    /// (`derived(url: rawValue, destination: "")`), without making that text when it is a derived one's digits.
    var derivedFromText: TransferID {
        self.withUTF8 { Self.derived(UnsafeRawBufferPointer($0), UnsafeRawBufferPointer(start: nil, count: 0)) }
    }

    /// Calls `body` with the UTF-8 bytes of ``rawValue``, without making that string when the identifier is a
    /// derived one's digits (they are written on the stack): the store binds an identifier in most of its statements,
    /// and each such string was an allocation, freed by another thread.
    func withUTF8<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        switch self.storage {
        case .hex(let value):
            var digits: (UInt64, UInt64) = (0, 0)
            return withUnsafeMutableBytes(of: &digits) { digits in
                for index in 0..<16 {
                    digits[index] = hexDigit(UInt8(truncatingIfNeeded: value >> (60 - 4 * index)) & 0x0f)
                }
                return body(UnsafeBufferPointer(digits.assumingMemoryBound(to: UInt8.self)))
            }
        case .text(let text):
            return text.withUTF8Bytes(body)
        }
    }

    /// The digest of `url`, a zero byte and `destination`, given to the hasher in one piece.
    private static func derived(_ url: UnsafeRawBufferPointer, _ destination: UnsafeRawBufferPointer) -> TransferID {
        withUnsafeTemporaryAllocation(byteCount: url.count + 1 + destination.count, alignment: 1) { bytes in
            if let base = url.baseAddress { bytes.baseAddress!.copyMemory(from: base, byteCount: url.count) }
            bytes[url.count] = 0
            if let base = destination.baseAddress {
                (bytes.baseAddress! + url.count + 1).copyMemory(from: base, byteCount: destination.count)
            }
            var hasher = SHA256()
            hasher.update(bufferPointer: UnsafeRawBufferPointer(bytes))
            // The digest's first eight bytes, in order: the number whose 16 hex digits they are.
            let value = hasher.finalize().withUnsafeBytes { digest in
                digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            }
            return TransferID(hex: value)
        }
    }

    /// The form `text` is kept in: the number it spells when it is exactly 16 lower-case hex digits. Read through the
    /// text's contiguous UTF-8 (`withUTF8`).
    private static func storage(of text: String) -> Storage {
        guard text.utf8.count == 16 else { return .text(text) }
        var copy = text
        let value = copy.withUTF8 { bytes -> UInt64? in
            var value: UInt64 = 0
            for byte in bytes {
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): value = value << 4 | UInt64(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): value = value << 4 | UInt64(byte - UInt8(ascii: "a") + 10)
                default: return nil
                }
            }
            return value
        }
        return value.map(Storage.hex) ?? .text(text)
    }

    /// The number the identifier's text spells when it is 16 lower-case hex digits, as every derived identifier's is
    /// (`nil` for other text).
    var derivedValue: UInt64? {
        if case .hex(let value) = self.storage { value } else { nil }
    }

    public var description: String { self.rawValue }

    public func hash(into hasher: inout Hasher) {
        switch self.storage {
        case .hex(let value): hasher.combine(value)
        case .text(let text): hasher.combine(text)
        }
    }

    public init(from decoder: any Decoder) throws {
        self.init(try decoder.singleValueContainer().decode(String.self))
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
            var index = 0
            for byte in bytes {
                utf8[index] = hexDigit(byte >> 4)
                utf8[index + 1] = hexDigit(byte & 0x0f)
                index += 2
            }
            return index
        }
    }
}

/// The lower-case hex digit of `nibble` (0 to 15), as an ASCII byte.
func hexDigit(_ nibble: UInt8) -> UInt8 {
    nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
}

extension String {
    /// Calls `body` with the string's UTF-8 bytes, read in place when the string stores them contiguously (every
    /// string Haul makes) and copied otherwise, without the mutable copy that `withUTF8` needs.
    func withUTF8Bytes<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if let result = self.utf8.withContiguousStorageIfAvailable(body) { return result }
        var copy = self
        return copy.withUTF8(body)
    }
}
