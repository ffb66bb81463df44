import Foundation
import Testing

@testable import Haul

@Suite("Sanitising file names")
struct FileNamingTests {
    @Test(arguments: [
        ("report.pdf", "report.pdf"),
        ("../../etc/passwd", "___.._etc_passwd"),
        ("/etc/passwd", "_etc_passwd"),
        ("a\\b", "a_b"),
        (".bashrc", "_bashrc"),
        ("bad\u{0}name", "bad_name"),
        ("line\nbreak\r", "line_break_"),
        ("  spaced  ", "spaced"),
        ("naïve café.txt", "naïve café.txt"),
        ("\u{3000}wide space\u{00A0}", "wide space"),
        ("tab\u{7f}\u{85}.txt", "tab__.txt"),
    ])
    func replacesWhatCouldEscapeOrHide(raw: String, expected: String) {
        #expect(FileNaming.sanitizedName(raw) == expected)
    }

    @Test(arguments: [
        "report.pdf", "f000001.bin", "a~b!c$d&e(f)g+h,i;j=k@l[m]n{o}p", "x." + String(repeating: "y", count: 253),
    ])
    func keepsPlainPrintableNamesAsTheyAre(raw: String) {
        #expect(FileNaming.sanitizedName(raw) == raw)
    }

    @Test(arguments: [
        ("name.", "name."), ("-", "-"), ("a\u{7f}", "a_"), ("résumé", "résumé"), ("a b", "a b"), (".x", "_x"),
    ])
    func namesBesidePlainOnesAreSanitisedAsAlways(raw: String, expected: String) {
        #expect(FileNaming.sanitizedName(raw) == expected)
    }

    @Test func aPlainNameOneByteTooLongIsCut() {
        let name = FileNaming.sanitizedName(String(repeating: "b", count: 252) + ".txt")
        #expect(name == String(repeating: "b", count: 251) + ".txt")
    }

    @Test(arguments: ["", " ", ".", "..", " .. "])
    func refusesNamesThatAreNotFiles(raw: String) {
        #expect(FileNaming.sanitizedName(raw) == nil)
    }

    @Test func cutsLongNamesTo255BytesKeepingTheExtension() throws {
        let name = try #require(FileNaming.sanitizedName(String(repeating: "é", count: 300) + ".tar"))
        #expect(name.utf8.count <= 255)
        #expect(name.hasSuffix("é.tar"))
    }

    @Test func dropsDotDotComponentsOfARelativePath() {
        #expect(FileNaming.sanitizedRelativePath("../a/./b/../c.txt") == ["a", "b", "c.txt"])
        #expect(FileNaming.sanitizedRelativePath("../..") == nil)
    }

    @Test(arguments: [
        ("http://h/a/b/file.zip", "file.zip"),
        ("http://h/a/hello%20world.txt", "hello world.txt"),
        ("http://h/a%2Fb", "a_b"),
        ("http://h/dir/", "index.html"),
        ("http://h", "index.html"),
        ("http://h/file.zip?token=1", "file.zip"),
        ("http://h/%2E%2E", "index.html"),
        ("http://h/file", "file"),
        ("http://h//a//b.bin", "b.bin"),
        ("http://h/d/%C3%A9t%C3%A9.jpg", "été.jpg"),
        ("http://h/d/été.jpg", "été.jpg"),
        ("http://h/a/b/#frag", "index.html"),
    ])
    func namesAFileAfterTheURL(url: String, expected: String) throws {
        #expect(FileNaming.name(fromURL: try #require(URL(string: url))) == expected)
    }

    @Test(arguments: [
        ("a.txt", 1, "a.1.txt"),
        ("archive.tar.gz", 2, "archive.tar.2.gz"),
        ("README", 3, "README.3"),
    ])
    func numbersAConflictBeforeTheExtension(name: String, n: Int, expected: String) {
        #expect(FileNaming.numbered(name, n) == expected)
    }
}

@Suite("Parsing Content-Disposition")
struct ContentDispositionTests {
    @Test(arguments: [
        ("attachment; filename=\"a.txt\"", "a.txt"),
        ("attachment; filename=a.txt", "a.txt"),
        ("attachment; FILENAME=\"a.txt\"", "a.txt"),
        ("attachment; filename=\"quoted \\\"name\\\".txt\"", "quoted \"name\".txt"),
        ("attachment; filename*=UTF-8''%e2%82%ac%20rates.txt", "€ rates.txt"),
        ("attachment; filename=\"fallback.txt\"; filename*=UTF-8''real.txt", "real.txt"),
        ("attachment; filename*=iso-8859-1'en'%E9t%E9.txt", "été.txt"),
        ("inline; filename=\"../x\"", "../x"),
    ])
    func findsTheFileName(header: String, expected: String) {
        #expect(ContentDisposition.fileName(in: header) == expected)
    }

    @Test(arguments: [
        ("../../etc/passwd", "passwd"),
        ("a/b\\c.txt", "c.txt"),
        ("C:\\Users\\me\\report.pdf", "report.pdf"),
        ("plain.txt", "plain.txt"),
        ("folder/", ""),
    ])
    func keepsOnlyTheNameAtTheEndOfAnOfferedPath(offered: String, expected: String) {
        #expect(ContentDisposition.lastComponent(of: offered) == expected)
    }

    @Test(arguments: [
        "attachment",
        "attachment; filename=\"unterminated",
        "attachment; size=3",
        "attachment; filename*=UTF-8''%zz",
        "attachment; filename*=koi8-r''abc",
    ])
    func findsNoNameInMalformedOrNamelessHeaders(header: String) {
        #expect(ContentDisposition.fileName(in: header) == nil)
    }
}

@Suite("Parsing Content-Range")
struct ContentRangeTests {
    @Test func parsesASatisfiedRange() {
        #expect(ContentRange(parsing: "bytes 100-199/1000") == ContentRange(range: 100...199, completeLength: 1000))
        #expect(ContentRange(parsing: "bytes 0-0/*") == ContentRange(range: 0...0, completeLength: nil))
    }

    @Test func parsesTheUnsatisfiedForm() {
        #expect(ContentRange(parsing: "bytes */1000") == ContentRange(range: nil, completeLength: 1000))
    }

    @Test(arguments: [
        "bytes 200-100/1000", "bytes 0-1000/1000", "bytes */*", "items 0-1/2", "bytes 0-1", "bytes -1-5/10",
        "bytes 0-99999999999999999999/100000000000000000000", "bytes 1-2/3\u{0}", "bytes a-b/c", "",
    ])
    func rejectsMalformedOrInconsistentRanges(header: String) {
        #expect(ContentRange(parsing: header) == nil)
    }
}

@Suite("Parsing checksums")
struct ChecksumTests {
    @Test func parsesAria2StyleChecksums() throws {
        let checksum = try #require(Checksum(parsing: "sha-256=" + String(repeating: "A", count: 64)))
        #expect(checksum.algorithm == .sha256)
        #expect(checksum.hexDigest == String(repeating: "a", count: 64))
        #expect(Checksum(parsing: "md5=" + String(repeating: "0", count: 32))?.algorithm == .md5)
        #expect(Checksum(parsing: "sha256=" + String(repeating: "0", count: 64))?.algorithm == .sha256)
    }

    @Test(arguments: ["sha-256=abc", "crc32=00000000", "sha-1=" + String(repeating: "g", count: 40), "nonsense"])
    func rejectsBadChecksums(text: String) {
        #expect(Checksum(parsing: text) == nil)
    }

    @Test func aCompletedFileKeptAsItsFolderAndPathEqualsOneMadeFromTheWholePath() {
        let folder = URL(filePath: "/tmp/haul/out/", directoryHint: .isDirectory)
        let compact = CompletedFile(
            folder: folder,
            relativePath: "sub/a.bin",
            byteCount: 3,
            sha256: nil,
            modificationTime: nil
        )
        let whole = CompletedFile(path: URL(filePath: "/tmp/haul/out/sub/a.bin"), byteCount: 3, sha256: nil)
        #expect(compact.path.path == "/tmp/haul/out/sub/a.bin")
        #expect(compact == whole)
        #expect(Set([compact, whole]).count == 1)
        #expect(compact != CompletedFile(path: URL(filePath: "/tmp/haul/out/sub/b.bin"), byteCount: 3, sha256: nil))
    }

    @Test(arguments: [
        ("/tmp/haul/out/", "sub/a.bin"), ("/tmp/haul/out", "a.bin"), ("/", "a.bin"), ("/tmp/x y/", "100% #1?.bin"),
        ("/tmp/ünï/", "ça va.txt"), ("/tmp/%20/", "a%2Fb"),
    ])
    func aCompletedFilesPathAsTextIsItsURLsPath(folder: String, relativePath: String) {
        let file = CompletedFile(
            folder: URL(filePath: folder, directoryHint: .isDirectory),
            relativePath: relativePath,
            byteCount: 1,
            sha256: nil,
            modificationTime: nil
        )
        #expect(file.filePath == file.path.path)
        let whole = CompletedFile(path: file.path, byteCount: 1, sha256: nil)
        #expect(whole.filePath == file.path.path)
    }

    @Test(arguments: [
        "", " ", "\t", "a", " a", "a ", "\ta\t", "\u{3000}a", "a\u{00A0}", "é", " é ", "a b", "\u{2003}\u{2003}",
    ])
    func trimsWhiteSpaceAsFoundationDoes(text: String) {
        #expect(text.trimmingWhitespace() == text.trimmingCharacters(in: .whitespaces))
        #expect(text[...].trimmingWhitespace() == text.trimmingCharacters(in: .whitespaces))
    }

    @Test(arguments: ["/tmp/x", "/tmp/x/", "/tmp/./x/../y", "/a//b/", "/tmp/.hidden/x", "/tmp/x y/%20", "/"])
    func standardisesAPathAsFoundationDoes(path: String) {
        let url = URL(filePath: path, directoryHint: .isDirectory)
        #expect(url.standardizedFilePath == url.standardizedFileURL.path)
    }
}

@Suite("Building files' paths")
struct FilePathTests {
    @Test func joinsAFolderAndNamesAsAppendingThemToItsURLWould() {
        let folders = [
            URL(filePath: "/tmp/haul out", directoryHint: .isDirectory),
            URL(filePath: "/tmp/dl/", directoryHint: .isDirectory),
            URL(filePath: "/", directoryHint: .isDirectory),
        ]
        let names = [["a.bin"], ["sub dir", "100% é.txt"], ["x#y?z;w", "[1].txt"], ["..a", "b%20c"]]
        for folder in folders {
            for components in names {
                let expected = components.reduce(folder) { $0.appending(path: $1, directoryHint: .notDirectory) }.path
                #expect(Download.path(in: Download.folderPath(of: folder), components) == expected)
            }
        }
    }

    @Test func dropsTheFoldersTrailingSlashes() {
        #expect(Download.path(in: "/tmp/dl//", ["a"]) == "/tmp/dl/a")
        #expect(Download.path(in: "/", ["a", "b"]) == "/a/b")
        #expect(Download.folderPath(of: URL(filePath: "/tmp/dl/", directoryHint: .isDirectory)) == "/tmp/dl")
    }
}

@Suite("Deriving identifiers")
struct DerivedIdentifierTests {
    @Test func areTheFirstSixteenHexDigitsOfTheSHA256OfURLZeroAndDestination() {
        // Pinned: a store written by an earlier version names its transfers with these (Python's hashlib agrees).
        #expect(
            TransferID.derived(url: "https://example.com/a.jpg", destination: "folder:/tmp/photos").rawValue
                == "202217891a3d3dd1"
        )
        #expect(TransferID.derived(url: "https://example.com/é x", destination: "").rawValue == "a341c6ed00efc95d")
    }

    @Test func anIdentifiersOwnDerivedIdentifierIsThatOfItsTextWithNoDestination() {
        for id: TransferID in ["202217891a3d3dd1", "0000000000000000", "ffffffffffffffff", "photo-1", "", "é"] {
            #expect(id.derivedFromText == TransferID.derived(url: id.rawValue, destination: ""), "\(id)")
        }
        #expect(
            TransferID("202217891a3d3dd1").derivedFromText.rawValue == "d70a241e2ae1185a",
            "Python's hashlib agrees"
        )
    }

    @Test func anIdentifiersBytesAreThoseOfItsTextWhetherItIsHeldAsDigitsOrAsText() throws {
        let ids: [TransferID] = ["202217891a3d3dd1", "0a0b0c0d0e0f1011", "ffffffffffffffff", "photo-1", "", "é"]
        for id in ids {
            #expect(id.withUTF8 { String(decoding: $0, as: UTF8.self) } == id.rawValue, "\(id)")
        }
    }

    @Test func aRequestsIdentifierNamesItsOwnDestinationWhenRequestsAlternateBetweenFolders() {
        // The last destination's path is kept for the next request: each request must still get its own.
        let url = URL(string: "https://example.com/a.jpg")!
        let (photos, other) = (URL(filePath: "/tmp/photos/"), URL(filePath: "/tmp/other"))
        let identifiers = [photos, photos, other, photos, other, other].map { TransferRequest(url: url, into: $0).id }
        let expected = [photos, photos, other, photos, other, other].map {
            TransferID.derived(url: url.absoluteString, destination: "folder:" + $0.standardizedFilePath)
        }
        #expect(identifiers == expected)
        #expect(identifiers[0].rawValue == "202217891a3d3dd1")
        #expect(identifiers[0] != identifiers[2])
        let file = TransferRequest(url: url, destination: .file(URL(filePath: "/tmp/photos"))).id
        #expect(file == TransferID.derived(url: url.absoluteString, destination: "file:/tmp/photos"))
        #expect(file != identifiers[0])
    }

    @Test func aChosenIdentifierWithTheSameTextIsTheSameIdentifier() {
        let derived = TransferID.derived(url: "https://example.com/a.jpg", destination: "folder:/tmp/photos")
        let chosen = TransferID("202217891a3d3dd1")
        #expect(chosen == derived)
        #expect(chosen.hashValue == derived.hashValue)
        #expect(Set([derived, chosen, "202217891a3d3dd1"]).count == 1)
        #expect(chosen.rawValue == "202217891a3d3dd1")
        #expect("\(derived)" == "202217891a3d3dd1")
    }

    @Test func chosenIdentifiersThatDifferOnlyInTheirFirstDigitsSpreadOverATablesBuckets() {
        // A table of 1,024 buckets files a hash by its last ten bits: identifiers whose numbers differ only above them
        // must not share a bucket, as they would if the number were the hash. Random hashes fill about 647.
        let identifiers = (0..<1024).map { TransferID(String(format: "%016llx", UInt64($0) << 40)) }
        for seed in [0, 1, -7, 0x5eed_f00d] {
            let buckets = Set(identifiers.map { $0._rawHashValue(seed: seed) & 1023 })
            #expect(buckets.count > 550)
        }
        #expect(Set(identifiers).count == 1024)
    }

    @Test func textThatIsNotSixteenLowerCaseHexDigitsIsKeptAsItIs() {
        // Upper case, one digit more or less, a letter past f, other text (sixteen bytes of UTF-8 in eight
        // characters too): each its own identifier, text unchanged.
        let texts = [
            "202217891A3D3DD1", "202217891a3d3dd", "202217891a3d3dd10", "202217891a3d3ddg", "photo-42", "", "é",
            "éééééééé", "0000000000000000", "ffffffffffffffff",
        ]
        let identifiers = texts.map { TransferID($0) }
        #expect(identifiers.map { $0.rawValue } == texts)
        #expect(Set(identifiers).count == texts.count)
        #expect(TransferID("202217891A3D3DD1") != TransferID("202217891a3d3dd1"))
    }

    @Test func anIdentifiersTextCanBeReplacedAndSurvivesEncoding() throws {
        var identifier = TransferID("photo-42")
        identifier.rawValue = "00000000000000ff"
        #expect(identifier == TransferID("00000000000000ff"))
        identifier.rawValue = "photo-43"
        #expect(identifier == "photo-43")
        let derived = TransferID.derived(url: "https://example.com/é x", destination: "")
        let encoded = try JSONEncoder().encode([derived, identifier])
        #expect(String(decoding: encoded, as: UTF8.self) == #"["a341c6ed00efc95d","photo-43"]"#)
        #expect(try JSONDecoder().decode([TransferID].self, from: encoded) == [derived, identifier])
    }

    @Test func aPartialFileIsNamedAfterItsFileAndTheHashOfItsIdentifier() {
        // Pinned (Python's hashlib agrees): a partial file left by an earlier version is found under the same name.
        #expect(
            Download.partPath(id: "f8c2b6e5ef6e6810", folderPath: "/dev/shm/hb/pp", nameComponents: ["f000005.bin"])
                == "/dev/shm/hb/pp/f000005.bin.25ba449c.part"
        )
        #expect(
            Download.partPath(id: "photo-42", folderPath: "/", nameComponents: ["2024", "summer", "a.jpg"])
                == "/2024/summer/a.jpg.b7e20cad.part"
        )
    }

    @Test func hexIsLowerCaseTwoDigitsPerByte() {
        #expect(String(hexOf: [0x00, 0x01, 0xab, 0xff]) == "0001abff")
        #expect(String(hexOf: [UInt8]()) == "")
        #expect(String(hexOf: (0..<3).lazy.map { UInt8($0 * 100) }) == "0064c8")
        // A number's big-endian bytes (the first `count`), as identifiers held as numbers give their text.
        func hex(_ value: UInt64, count: Int = 8) -> String {
            withUnsafeBytes(of: value.bigEndian) { String(hexOf: $0.prefix(count)) }
        }
        #expect(hex(0x0001_abff_0064_c8e9) == "0001abff0064c8e9")
        #expect(hex(.max) == "ffffffffffffffff")
        #expect(hex(0x25ba_449c_0000_0001, count: 4) == "25ba449c")
        #expect(hex(0x0000_000a_ffff_ffff, count: 4) == "0000000a")
    }
}

@Suite("Paths taken once per batch")
struct LastPathTests {
    @Test func anEqualURLGetsTheRememberedPathAndAnotherURLItsOwn() {
        var cache = LastPath()
        var computed: [String] = []
        func path(_ url: URL) -> String {
            computed.append(url.path)
            return url.path
        }
        let first = URL(filePath: "/data/album", directoryHint: .isDirectory)
        let second = URL(filePath: "/data/album/extra", directoryHint: .isDirectory)
        #expect(cache.path(of: first, path) == "/data/album")
        #expect(cache.path(of: URL(filePath: "/data/album", directoryHint: .isDirectory), path) == "/data/album")
        #expect(cache.path(of: second, path) == "/data/album/extra")
        #expect(cache.path(of: first, path) == "/data/album")
        #expect(computed == ["/data/album", "/data/album/extra", "/data/album"])
    }
}
