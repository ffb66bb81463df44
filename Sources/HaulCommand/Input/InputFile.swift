import ArgumentParser
import Foundation
import Haul

/// One item of an input file: a URL and the options indented below it.
struct InputItem: Equatable, Sendable {
    var url: URL
    var lineNumber: Int
    /// `out=NAME`: the file name in the destination folder.
    var outputName: String?
    /// `dir=DIR`: the destination folder, relative to `-d` (without `..`) unless absolute.
    var directory: String?
    /// `checksum=ALGO=HEX`.
    var checksum: Checksum?
    /// `header=Name: value`, repeatable.
    var headers: [HTTPHeaderLine] = []
}

/// A header given as `Name: value`.
struct HTTPHeaderLine: Equatable, Sendable {
    var name: String
    var value: String

    /// Parses `Name: value`; `nil` when there is no colon, the name is empty or not a token, or either part holds a
    /// line break (which would let a value smuggle another header).
    init?(parsing text: String) {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let name = text[..<colon].trimmingCharacters(in: .whitespaces)
        let value = text[text.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        let tokenCharacters = CharacterSet(
            charactersIn: "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
        )
        guard !name.isEmpty, name.unicodeScalars.allSatisfy(tokenCharacters.contains),
            !value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" })
        else { return nil }
        self.name = name
        self.value = value
    }
}

/// An error in an input file, with the line it is on.
struct InputFileError: Error, Equatable, CustomStringConvertible {
    var lineNumber: Int
    var message: String
    var description: String { "line \(self.lineNumber): \(self.message)" }
}

/// Parses aria2c's input-file format one line at a time, so a list of any length is read in constant memory.
///
/// A line that is not indented and not a `#` comment is a URL and starts an item; the lines below it that start with
/// white space hold `key=value` options for it: `out`, `dir`, `checksum`, `header` (repeatable). Blank lines are
/// ignored. Pure: feed it lines, it returns the items it has completed.
struct InputFileParser {
    private var current: InputItem?
    private var lineNumber = 0

    /// Takes the next line; returns the previous item when this line starts a new one.
    mutating func feed(_ rawLine: Substring) throws(InputFileError) -> InputItem? {
        self.lineNumber += 1
        var line = rawLine
        // A byte-order mark before the first line (editors on Windows write one) is not part of a URL.
        if self.lineNumber == 1, line.unicodeScalars.first == "\u{FEFF}" {
            line = Substring(line.unicodeScalars.dropFirst())
        }
        if line.allSatisfy({ $0 == " " || $0 == "\t" }) { return nil }
        if line.first == " " || line.first == "\t" {
            try self.addOption(line.trimmingWhitespace())
            return nil
        }
        if line.first == "#" { return nil }
        let finished = self.current
        self.current = try InputItem(
            url: Self.url(String(line), lineNumber: self.lineNumber),
            lineNumber: self.lineNumber
        )
        return finished
    }

    /// Ends the input; returns the last item, if any.
    mutating func finish() -> InputItem? {
        defer { self.current = nil }
        return self.current
    }

    private mutating func addOption(_ option: String) throws(InputFileError) {
        guard self.current != nil else {
            throw InputFileError(lineNumber: self.lineNumber, message: "an option comes before any URL")
        }
        guard let equals = option.firstIndex(of: "=") else {
            throw InputFileError(lineNumber: self.lineNumber, message: "expected key=value, found \"\(option)\"")
        }
        let key = option[..<equals].trimmingCharacters(in: .whitespaces)
        let value = String(option[option.index(after: equals)...])
        switch key {
        case "out":
            guard !value.isEmpty, !value.contains("/"), value != ".", value != ".." else {
                throw InputFileError(lineNumber: self.lineNumber, message: "out= takes a file name without /")
            }
            self.current!.outputName = value
        case "dir":
            guard !value.isEmpty else { throw InputFileError(lineNumber: self.lineNumber, message: "dir= is empty") }
            // A folder under -d stays under it: a generated list's `dir=../..` would write anywhere. Another folder
            // is named by its absolute path, as the user's own choice.
            guard value.hasPrefix("/") || !value.split(separator: "/").contains("..") else {
                throw InputFileError(
                    lineNumber: self.lineNumber,
                    message: "dir= relative to -d cannot contain .. (name another folder by its absolute path)"
                )
            }
            self.current!.directory = value
        case "checksum":
            guard let checksum = Checksum(parsing: value) else {
                throw InputFileError(
                    lineNumber: self.lineNumber,
                    message:
                        "checksum= takes ALGO=HEX with ALGO one of sha-256, sha-512, sha-1, md5 and a digest of its length"
                )
            }
            self.current!.checksum = checksum
        case "header":
            guard let header = HTTPHeaderLine(parsing: value) else {
                throw InputFileError(lineNumber: self.lineNumber, message: "header= takes \"Name: value\"")
            }
            self.current!.headers.append(header)
        default:
            throw InputFileError(
                lineNumber: self.lineNumber,
                message: "unknown option \"\(key)\" (known: out, dir, checksum, header)"
            )
        }
    }

    /// An absolute http or https URL, or an error that says what is wrong with it.
    static func url(_ text: String, lineNumber: Int) throws(InputFileError) -> URL {
        let trimmed = text.trimmingWhitespace()
        guard let url = Self.parse(trimmed), let scheme = url.scheme?.lowercased(), url.host?.isEmpty == false else {
            throw InputFileError(lineNumber: lineNumber, message: "not an absolute URL: \"\(trimmed)\"")
        }
        guard scheme == "http" || scheme == "https" else {
            throw InputFileError(
                lineNumber: lineNumber,
                message: "only http and https URLs are supported: \"\(trimmed)\""
            )
        }
        return url
    }
}

/// Reads a file (or standard input for `-`) line by line, in constant memory.
final class LineReader {
    private let file: UnsafeMutablePointer<FILE>
    private let ownsFile: Bool

    init(path: String) throws {
        if path == "-", let input = fdopen(STDIN_FILENO, "r") {
            self.file = input
            self.ownsFile = false
        } else {
            guard let file = fopen(path, "r") else {
                throw InputFileError(lineNumber: 0, message: "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            self.file = file
            self.ownsFile = true
        }
    }

    deinit { if self.ownsFile { fclose(self.file) } }

    /// The next line without its line break, or `nil` at the end.
    func next() -> Substring? {
        var buffer: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(buffer) }
        var count = getline(&buffer, &capacity, self.file)
        guard count >= 0, let buffer else { return nil }
        // Trim the line break as bytes: as characters, "\r\n" is one grapheme and "\n" would not match it.
        while count > 0, buffer[count - 1] == 0x0A || buffer[count - 1] == 0x0D { count -= 1 }
        return String(decoding: UnsafeRawBufferPointer(start: buffer, count: count), as: UTF8.self)[...]
    }
}

/// The lines of an input file, readable twice: a file is opened again for each pass (constant memory), standard
/// input, which can be read only once, is kept in memory.
enum InputLines {
    case file(String)
    case buffered([Substring])

    /// Opens `path` (`-` for standard input); throws when it cannot be read.
    static func open(_ path: String) throws -> InputLines {
        let reader = try LineReader(path: path)
        guard path == "-" else { return .file(path) }
        var lines: [Substring] = []
        while let line = reader.next() { lines.append(line) }
        return .buffered(lines)
    }

    func forEach(_ body: (Substring) throws -> Void) throws {
        var lines = try self.makeIterator()
        while let line = lines.next() { try body(line) }
    }

    /// The lines from the first, read as they are asked for.
    func makeIterator() throws -> Iterator {
        switch self {
        case .file(let path): Iterator(source: .reader(try LineReader(path: path)))
        case .buffered(let lines): Iterator(source: .buffered(lines.makeIterator()))
        }
    }

    struct Iterator: IteratorProtocol {
        enum Source {
            case reader(LineReader)
            case buffered(IndexingIterator<[Substring]>)
        }

        var source: Source

        mutating func next() -> Substring? {
            switch self.source {
            case .reader(let reader):
                return reader.next()
            case .buffered(var lines):
                defer { self.source = .buffered(lines) }
                return lines.next()
            }
        }
    }
}

/// An input file whose every line has been checked, and its items. Up to ``keptItems`` of them are kept from the check,
/// parsed; a longer list is read and parsed again, as a stream, when its items are wanted (constant memory).
struct CheckedInput {
    /// How many parsed items the check keeps: as many as `haul get` keeps queued, so a list is read and parsed once.
    static let keptItems = 4_096

    /// How many items the input holds.
    let itemCount: Int
    private let source: Source

    private enum Source {
        case items([InputItem])
        case lines(InputLines)
    }

    /// Opens an input file (or `-`) and checks every line first, so that a bad line transfers nothing: on an error
    /// it prints `haul: FILE: line N: ...` and exits 64. `check` may refuse an item (an option the command does not
    /// take) with a message.
    static func open(_ path: String, check: (InputItem) -> String? = { _ in nil }) throws -> CheckedInput {
        do {
            let lines = try InputLines.open(path)
            var parser = InputFileParser()
            var count = 0
            var kept: [InputItem]? = []
            func checked(_ item: InputItem) throws(InputFileError) {
                if let message = check(item) { throw InputFileError(lineNumber: item.lineNumber, message: message) }
                count += 1
                if count <= Self.keptItems { kept?.append(item) } else { kept = nil }
            }
            try lines.forEach { line in
                if let item = try parser.feed(line) { try checked(item) }
            }
            if let item = parser.finish() { try checked(item) }
            return CheckedInput(itemCount: count, source: kept.map { .items($0) } ?? .lines(lines))
        } catch let error as InputFileError {
            Get.printError("haul: \(path): \(error.lineNumber > 0 ? "\(error)" : error.message)")
            throw ExitCode(64)
        }
    }

    /// Calls `body` with each item of the input, in order: those kept from the check, or the file's, read again as a
    /// stream (a line at a time, while `body` waits).
    func forEachItem(_ body: (InputItem) async throws -> Void) async throws {
        switch self.source {
        case .items(let items):
            for item in items { try await body(item) }
        case .lines(let lines):
            var parser = InputFileParser()
            var iterator = try lines.makeIterator()
            while let line = iterator.next() {
                if let item = try parser.feed(line) { try await body(item) }
            }
            if let item = parser.finish() { try await body(item) }
        }
    }
}

extension InputFileParser {
    /// The URL a person wrote, with its spaces and non-ASCII characters (`résumé 1.pdf`) percent-encoded and the
    /// escapes it has (`%20`) kept: Foundation encodes such a text itself, but then encodes its escapes' `%` too, and
    /// `r%C3%A9sum%C3%A9%201.pdf` became a request for `…%25201.pdf`. A text with nothing to encode is Foundation's
    /// to parse as it is (nearly every URL: one pass over its bytes).
    static func parse(_ text: String) -> URL? {
        var text = text
        let encoded = text.withUTF8 { bytes -> String? in
            func isEscape(at index: Int) -> Bool {
                bytes[index] == UInt8(ascii: "%") && index + 2 < bytes.count && Self.isHex(bytes[index + 1])
                    && Self.isHex(bytes[index + 2])
            }
            func isKept(at index: Int) -> Bool {
                let byte = bytes[index]
                guard byte > 0x20, byte < 0x7F else { return false }
                switch byte {
                case UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "^"),
                    UInt8(ascii: "`"), UInt8(ascii: "{"), UInt8(ascii: "|"), UInt8(ascii: "}"):
                    return false
                case UInt8(ascii: "%"):
                    return isEscape(at: index)
                default:
                    return true
                }
            }
            guard bytes.indices.contains(where: { !isKept(at: $0) }) else { return nil }
            let digits = Array("0123456789ABCDEF".utf8)
            var encoded: [UInt8] = []
            encoded.reserveCapacity(bytes.count * 3)
            for index in bytes.indices {
                if isKept(at: index) {
                    encoded.append(bytes[index])
                } else {
                    encoded += [UInt8(ascii: "%"), digits[Int(bytes[index] >> 4)], digits[Int(bytes[index] & 0x0F)]]
                }
            }
            return String(decoding: encoded, as: UTF8.self)
        }
        return URL(string: encoded ?? text)
    }

    private static func isHex(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
            UInt8(ascii: "A")...UInt8(ascii: "F"):
            true
        default: false
        }
    }

    /// Checks URLs given as arguments as the parser checks a line, naming the argument that is wrong.
    static func validateArguments(_ urls: [String]) throws {
        for (index, url) in urls.enumerated() {
            do {
                _ = try Self.url(url, lineNumber: index + 1)
            } catch {
                throw ValidationError("Argument \(index + 1): \(error.message)")
            }
        }
    }
}
