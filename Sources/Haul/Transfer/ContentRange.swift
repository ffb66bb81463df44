/// A `Content-Range` header of a 206 or 416 response (RFC 9110 §14.4), parsed strictly.
struct ContentRange: Hashable, Sendable {
    /// The first and last byte positions sent, inclusive; `nil` for the unsatisfied form `bytes */N`.
    var range: ClosedRange<Int64>?
    /// The complete length of the representation, `nil` when the server sent `*`.
    var completeLength: Int64?

    /// Parses `bytes FIRST-LAST/LENGTH`, `bytes FIRST-LAST/*` or `bytes */LENGTH`; `nil` for anything else,
    /// including numbers that overflow, `LAST < FIRST`, or `LAST >= LENGTH`.
    init?(parsing header: String) {
        var text = Substring(header).drop(while: { $0 == " " })
        guard text.lowercased().hasPrefix("bytes ") else { return nil }
        text = text.dropFirst(6).drop(while: { $0 == " " })
        guard let slash = text.firstIndex(of: "/") else { return nil }
        let rangePart = text[..<slash]
        let lengthPart = text[text.index(after: slash)...].trimmingSuffix(while: { $0 == " " })
        if lengthPart == "*" {
            self.completeLength = nil
        } else {
            guard let length = Self.number(lengthPart) else { return nil }
            self.completeLength = length
        }
        if rangePart == "*" {
            guard self.completeLength != nil else { return nil }
            self.range = nil
            return
        }
        let bounds = rangePart.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = Self.number(bounds[0]), let last = Self.number(bounds[1]), first <= last
        else { return nil }
        if let length = self.completeLength, last >= length { return nil }
        self.range = first...last
    }

    init(range: ClosedRange<Int64>?, completeLength: Int64?) {
        self.range = range
        self.completeLength = completeLength
    }

    /// A non-negative decimal number of at most 18 digits (so it fits in `Int64`), digits only.
    private static func number(_ text: Substring) -> Int64? {
        guard !text.isEmpty, text.count <= 18, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int64(text)
    }
}

extension Substring {
    fileprivate func trimmingSuffix(while predicate: (Character) -> Bool) -> Substring {
        var result = self
        while let last = result.last, predicate(last) { result = result.dropLast() }
        return result
    }
}
