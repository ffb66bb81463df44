/// What a request's target and fields may hold to be written as they are (RFC 9112 and RFC 9110), checked over their
/// bytes once, as the request is made: above all no CR, LF or NUL, which would let a value end the line it is on and
/// add lines of its own to the request. Haul's own connections check the target too; AsyncHTTPClient's requests
/// (https, uploads, deletions) have their fields checked here as well, so that every request refuses such a field
/// with the same error (SwiftNIO's validator refused it as a "malformed response").
enum RequestCheck {
    /// Throws ``HaulError/Code/invalidRequest``, naming the field, for the first field that cannot be sent as it is.
    static func checkFields(_ fields: [(name: String, value: String)]) throws(HaulError) {
        for (name, value) in fields {
            guard Self.isValidName(name) else {
                throw HaulError(.invalidRequest, "The header name \"\(name)\" is not a valid HTTP field name")
            }
            guard Self.isValidValue(value) else {
                throw HaulError(.invalidRequest, "The value of the header \"\(name)\" has a control character")
            }
        }
    }

    /// A request target of visible ASCII: no space, control character or byte past 0x7E (a URL's path and query as
    /// they were written, percent-encoded).
    static func isValidTarget(_ target: String) -> Bool {
        var target = target
        return !target.isEmpty && target.withUTF8 { $0.allSatisfy { (0x21...0x7E).contains($0) } }
    }

    /// A field name: a token, one or more of letters, digits and ``tokenPunctuation``.
    static func isValidName(_ name: String) -> Bool {
        var name = name
        return !name.isEmpty && name.withUTF8 { $0.allSatisfy(Self.isTokenByte) }
    }

    /// A field value: no control character but the horizontal tab (bytes past 0x7F are text in some encoding, and
    /// allowed, as RFC 9110's obs-text).
    static func isValidValue(_ value: String) -> Bool {
        var value = value
        return value.withUTF8 { $0.allSatisfy(Self.isValueByte) }
    }

    /// Whether `byte` may be part of a field's value, in a request or a response: any byte but a control character
    /// other than the horizontal tab.
    static func isValueByte(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "\t") || (byte >= 0x20 && byte != 0x7F)
    }

    /// Whether `bytes` spell `lowercase` (lower-case ASCII letters, digits and punctuation) in any case: a field's
    /// name or a token, in a request or a response.
    static func equalsIgnoringCase(_ bytes: UnsafeRawBufferPointer, _ lowercase: StaticString) -> Bool {
        guard bytes.count == lowercase.utf8CodeUnitCount else { return false }
        let expected = lowercase.utf8Start
        for index in 0..<bytes.count {
            let byte = bytes[index]
            let folded = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
            guard folded == expected[index] else { return false }
        }
        return true
    }

    /// The punctuation a token may hold (RFC 9110, 5.6.2).
    static let tokenPunctuation = Array("!#$%&'*+-.^_`|~".utf8)

    /// Whether `byte` may be part of a token: a field's name, in a request or a response.
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default:
            Self.tokenPunctuation.contains(byte)
        }
    }
}
