import Foundation
import NIOCore
import Testing

@testable import Haul

#if os(Linux)
import CHaulSystem
#endif

@Suite("Writing a partial file")
struct PartialFileTests {
    /// A fresh folder for one test, removed at the end.
    final class Folder {
        let url = FileManager.default.temporaryDirectory.appending(path: "haul-partial-\(UUID().uuidString)")
        init() throws { try FileManager.default.createDirectory(at: self.url, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(at: self.url) }
    }

    /// `count` bytes of a pattern that differs at every offset of a batch, starting at `start`.
    static func bytes(_ count: Int, from start: Int = 0) -> [UInt8] {
        (start..<start + count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) }
    }

    static func onDisk(_ path: URL) throws -> [UInt8] { [UInt8](try Data(contentsOf: path)) }

    @Test func buffersOfEverySizeLandInOrderAtTheirOffsets() throws {
        let folder = try Folder()
        let path = folder.url.appending(path: "f.part")
        // Small, odd, batch-sized and larger-than-batch parts, so that writes span several buffers and cut some.
        let sizes = [1, 16_384, 7, 300_000, 65_536, 65_536, 65_536, 65_535, 3, 1_000_000, 12]
        var expected: [UInt8] = []
        do {
            var file = try PartialFile(openingAt: path.path)
            for size in sizes {
                let part = Self.bytes(size, from: expected.count)
                expected += part
                try file.append(ByteBuffer(bytes: part))
            }
            try file.flush()
            #expect(file.size == Int64(expected.count))
        }
        #expect(try Self.onDisk(path) == expected)
    }

    @Test func smallBuffersAreGatheredUntilTheBatchIsFull() throws {
        let folder = try Folder()
        let path = folder.url.appending(path: "f.part")
        var file = try PartialFile(openingAt: path.path)
        for index in 0..<15 { try file.append(ByteBuffer(bytes: Self.bytes(16_384, from: index * 16_384))) }
        #expect(try Self.onDisk(path).isEmpty)
        try file.append(ByteBuffer(bytes: Self.bytes(16_384, from: 15 * 16_384)))
        #expect(try Self.onDisk(path) == Self.bytes(PartialFile.batchSize))
    }

    @Test func aFewBytesHeldInALargeBufferAreWrittenAtOnceRatherThanKeepingTheBufferAlive() throws {
        let folder = try Folder()
        let path = folder.url.appending(path: "f.part")
        var file = try PartialFile(openingAt: path.path)
        var large = ByteBuffer(bytes: Self.bytes(PartialFile.maximumHeldStorage))
        let slice = large.readSlice(length: 100)!
        try file.append(slice)
        #expect(try Self.onDisk(path) == Self.bytes(100))
    }

    @Test func manyTinyBuffersAreWrittenBeforeTheyPassTheSystemsLimitOfVectors() throws {
        let folder = try Folder()
        let path = folder.url.appending(path: "f.part")
        var file = try PartialFile(openingAt: path.path)
        for index in 0..<PartialFile.maximumBuffers - 1 {
            try file.append(ByteBuffer(bytes: Self.bytes(10, from: index * 10)))
        }
        #expect(try Self.onDisk(path).isEmpty)
        try file.append(ByteBuffer(bytes: Self.bytes(10, from: (PartialFile.maximumBuffers - 1) * 10)))
        #expect(try Self.onDisk(path) == Self.bytes(PartialFile.maximumBuffers * 10))
    }

    #if os(Linux)
    /// Thrown when the system cannot make a file without a name (every Linux file system the tests run on can).
    struct NoFileWithoutAName: Error {}

    /// A new file without a name in `folder`, whose `.part` name would be `part`.
    static func unnamed(in folder: String, part: String) throws -> PartialFile {
        guard let file = PartialFile(unnamedIn: folder, partPath: part) else { throw NoFileWithoutAName() }
        return file
    }

    /// The names in a folder, sorted.
    static func names(in folder: Folder) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: folder.url.path).sorted()
    }

    @Test func aFileWithoutANameLeavesNothingInItsFolderUntilItIsPublished() throws {
        let folder = try Folder()
        let target = folder.url.appending(path: "f.bin")
        var file = try Self.unnamed(in: folder.url.path, part: target.path + ".tag.part")
        try file.append(ByteBuffer(bytes: Self.bytes(300_000)))
        try file.flush()
        #expect(try Self.names(in: folder) == [])
        #expect(try file.publishWithoutReplacing(at: target.path))
        let isUnnamed = file.isUnnamed
        #expect(!isUnnamed)
        #expect(try Self.onDisk(target) == Self.bytes(300_000))
        #expect(try Self.names(in: folder) == ["f.bin"])
    }

    @Test func publishingAFileWithoutANameNeverReplacesOneThere() throws {
        let folder = try Folder()
        let taken = folder.url.appending(path: "f.bin")
        try Data("keep".utf8).write(to: taken)
        var file = try Self.unnamed(in: folder.url.path, part: taken.path + ".tag.part")
        try file.append(ByteBuffer(bytes: Self.bytes(1_000)))
        try file.flush()
        #expect(try file.publishWithoutReplacing(at: taken.path) == false)
        let isUnnamed = file.isUnnamed
        #expect(isUnnamed)
        #expect(try Self.onDisk(taken) == Array("keep".utf8))
        let next = folder.url.appending(path: "f (1).bin")
        #expect(try file.publishWithoutReplacing(at: next.path))
        #expect(try Self.onDisk(next) == Self.bytes(1_000))
    }

    @Test func anUnfinishedFileWithoutANameKeepsItsBytesUnderItsPartialNameInsteadOfAStaleOne() throws {
        let folder = try Folder()
        let part = folder.url.appending(path: "f.bin.tag.part")
        try Data(repeating: 0xEE, count: 5_000).write(to: part)
        var file = try Self.unnamed(in: folder.url.path, part: part.path)
        // Gathered, not yet written: naming the file writes them first.
        try file.append(ByteBuffer(bytes: Self.bytes(2_000)))
        try file.nameAtPartPath()
        let isUnnamed = file.isUnnamed
        #expect(!isUnnamed)
        #expect(try Self.onDisk(part) == Self.bytes(2_000))
        try file.append(ByteBuffer(bytes: Self.bytes(500, from: 2_000)))
        try file.flush()
        #expect(try Self.onDisk(part) == Self.bytes(2_500))
    }

    @Test func aFileWithoutANameThatIsNeverPublishedLeavesNothingBehind() throws {
        let folder = try Folder()
        do {
            var file = try Self.unnamed(in: folder.url.path, part: folder.url.path + "/f.tag.part")
            try file.append(ByteBuffer(bytes: Self.bytes(100)))
            try file.flush()
        }
        do {
            var file = try Self.unnamed(in: folder.url.path, part: folder.url.path + "/g.tag.part")
            try file.append(ByteBuffer(bytes: Self.bytes(100)))
            try file.flush()
            file.discard()
        }
        #expect(try Self.names(in: folder) == [])
    }

    @Test func aFileWithoutANameCanReplaceOneWhenThePolicySaysSo() throws {
        let folder = try Folder()
        let target = folder.url.appending(path: "f.bin")
        try Data("old".utf8).write(to: target)
        var file = try Self.unnamed(in: folder.url.path, part: target.path + ".tag.part")
        try file.append(ByteBuffer(bytes: Self.bytes(700)))
        try file.publishReplacing(at: target.path)
        #expect(try Self.onDisk(target) == Self.bytes(700))
        #expect(try Self.names(in: folder) == ["f.bin"])
    }

    @Test func aFileWithoutANameIsNamedThroughProcAsOnKernelsThatRefuseItsDescriptor() throws {
        // The path taken when `linkat` refuses AT_EMPTY_PATH (before Linux 6.10, without CAP_DAC_READ_SEARCH): the
        // tests run where it is allowed, so the fallback is called directly.
        let folder = try Folder()
        let target = folder.url.appending(path: "f.bin")
        func unnamedDescriptor(holding bytes: [UInt8]) throws -> Int32 {
            let descriptor = haul_open_unnamed(folder.url.path, 0o644)
            try #require(descriptor >= 0)
            let written = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
            try #require(written == bytes.count)
            return descriptor
        }
        let first = try unnamedDescriptor(holding: Self.bytes(4_096))
        defer { close(first) }
        #expect(haul_link_descriptor_through_proc(first, target.path) == 0)
        #expect(try Self.onDisk(target) == Self.bytes(4_096))
        let second = try unnamedDescriptor(holding: Self.bytes(10, from: 7))
        defer { close(second) }
        let refused = haul_link_descriptor_through_proc(second, target.path)
        let error = errno
        #expect(refused == -1)
        #expect(error == EEXIST)
        #expect(try Self.onDisk(target) == Self.bytes(4_096))
        #expect(try Self.names(in: folder) == ["f.bin"])
    }

    @Test func aFileWithoutANameCreatesItsMissingFolders() throws {
        let folder = try Folder()
        let inner = folder.url.appending(path: "a/b")
        var file = try Self.unnamed(in: inner.path, part: inner.path + "/f.tag.part")
        try file.append(ByteBuffer(bytes: Self.bytes(10)))
        try file.flush()
        #expect(try file.publishWithoutReplacing(at: inner.path + "/f"))
        #expect(try Self.onDisk(inner.appending(path: "f")) == Self.bytes(10))
    }
    #endif

    @Test func aFoldersPartialFilesAreKnownFromItsFirstReadingAndFromWhatTheProcessMakesAfter() throws {
        let folder = try Folder()
        let names = PartFileNames()
        let stale = folder.url.appending(path: "a.bin.tag.part").path
        try Data("left".utf8).write(to: URL(filePath: stale))
        #expect(names.mayExist(at: stale))
        #expect(!names.mayExist(at: folder.url.appending(path: "b.bin.tag.part").path))
        // Made on disk after the folder was read, without telling: not known (another process's file).
        let unseen = folder.url.appending(path: "c.bin.tag.part").path
        try Data("later".utf8).write(to: URL(filePath: unseen))
        #expect(!names.mayExist(at: unseen))
        // Made by this process, then renamed away.
        let made = folder.url.appending(path: "d.bin.tag.part").path
        names.made(made)
        #expect(names.mayExist(at: made))
        names.gone(made)
        #expect(!names.mayExist(at: made))
        // A folder that does not exist yet holds none; what is made there once it does is known.
        let inner = folder.url.appending(path: "new").path
        #expect(!names.mayExist(at: inner + "/e.part"))
        names.made(inner + "/e.part")
        #expect(names.mayExist(at: inner + "/e.part"))
    }

    @Test(arguments: [
        ("/tmp/x/a.part", "/tmp/x", "a.part"), ("/a.part", "/", "a.part"), ("a.part", ".", "a.part"),
        ("/tmp/é/ü.part", "/tmp/é", "ü.part"), ("/tmp/x/", "/tmp/x", ""),
    ])
    func aPathIsSplitIntoItsFolderAndName(path: String, folder: String, name: String) {
        #expect(PartFileNames.split(path) == (folder, name))
    }

    @Test func aFolderPastTheBoundIsLookedAtOnDiskForEachFile() throws {
        let folder = try Folder()
        let names = PartFileNames(maximumFolders: 1)
        #expect(!names.mayExist(at: folder.url.appending(path: "a").path + "/x.part"))
        // Not remembered: every name may be there, and the file itself is looked at.
        #expect(names.mayExist(at: folder.url.appending(path: "b").path + "/y.part"))
        #expect(!names.mayExist(at: folder.url.appending(path: "a").path + "/z.part"))
    }

    @Test func writingResumesAtTheEndOfWhatIsAlreadyThere() throws {
        let folder = try Folder()
        let path = folder.url.appending(path: "f.part")
        try Data(Self.bytes(1_000)).write(to: path)
        var file = try PartialFile(openingAt: path.path)
        #expect(file.size == 1_000)
        try file.append(ByteBuffer(bytes: Self.bytes(500, from: 1_000)))
        try file.flush()
        #expect(try Self.onDisk(path) == Self.bytes(1_500))
    }

    @Test func reservingTheRestOfAFileKeepsItsSizeSoThatResumingStartsWhereItsBytesEnd() throws {
        let folder = try Folder()
        let path = folder.url.appending(path: "f.part").path
        let length: Int64 = 4 << 20
        do {
            var file = try PartialFile(openingAt: path)
            try file.append(ByteBuffer(bytes: Self.bytes(1_000)))
            try file.flush()
            let tooLittle = try file.reserve(toLength: 1_000 + PartialFile.reservationMinimum - 1)
            #expect(!tooLittle, "less than one write's worth is not reserved")
            let reserved = try file.reserve(toLength: length)
            var status = stat()
            #expect(stat(path, &status) == 0)
            #expect(status.st_size == 1_000)
            if reserved { #expect(Int64(status.st_blocks) * 512 >= length, "the blocks are the file's") }
        }
        var resumed = try PartialFile(openingAt: path)
        #expect(resumed.size == 1_000)
        try resumed.append(ByteBuffer(bytes: Self.bytes(500, from: 1_000)))
        try resumed.flush()
        #expect(try Self.onDisk(URL(filePath: path)) == Self.bytes(1_500))
    }

    /// Whether files in the temporary folder get their blocks reserved: not on tmpfs, nor where `fallocate` fails.
    static let temporaryFolderReservesBlocks: Bool = {
        let path = FileManager.default.temporaryDirectory.appending(path: "haul-probe-\(UUID().uuidString)").path
        defer { PartialFile.remove(path) }
        guard let file = try? PartialFile(openingAt: path) else { return false }
        return (try? file.reserve(toLength: 4 << 20)) ?? false
    }()

    @Test(
        .enabled(
            if: PartialFileTests.temporaryFolderReservesBlocks,
            "the temporary folder's file system reserves no blocks (tmpfs, or no fallocate)"
        )
    )
    func aFileLargerThanTheRoomLeftIsRefusedAndHoldsNoBlockAfterwards() throws {
        let folder = try Folder()
        let path = folder.url.appending(path: "f.part").path
        let file = try PartialFile(openingAt: path)
        #expect(try file.reserve(toLength: 4 << 20))
        #expect(throws: HaulError.self) { try file.reserve(toLength: 1 << 50) }
        var status = stat()
        #expect(stat(path, &status) == 0)
        #expect(status.st_size == 0)
        #expect(Int64(status.st_blocks) * 512 <= 4 << 20 + 65_536, "no more than the first reservation")
    }

    #if os(Linux)
    /// Whether `/dev/shm` is a tmpfs, as on most Linux systems.
    static let sharedMemoryIsTmpfs: Bool = {
        let mounts = (try? String(contentsOfFile: "/proc/mounts", encoding: .utf8)) ?? ""
        return mounts.split(separator: "\n").contains(where: { $0.hasPrefix("tmpfs /dev/shm tmpfs ") })
    }()

    @Test(.enabled(if: PartialFileTests.sharedMemoryIsTmpfs, "/dev/shm is not a tmpfs here"))
    func onTmpfsNothingIsReservedAsTheWritesWouldAllocateThePagesTwice() throws {
        let path = "/dev/shm/haul-reserve-\(UUID().uuidString)"
        defer { unlink(path) }
        let file = try PartialFile(openingAt: path)
        let reserved = try file.reserve(toLength: 4 << 20)
        #expect(!reserved)
        var status = stat()
        #expect(stat(path, &status) == 0 && status.st_blocks == 0)
    }
    #endif

    @Test func startingOverEmptiesTheFileAndDropsWhatWasGathered() throws {
        let folder = try Folder()
        let path = folder.url.appending(path: "f.part")
        try Data(Self.bytes(1_000)).write(to: path)
        var file = try PartialFile(openingAt: path.path)
        try file.append(ByteBuffer(bytes: Self.bytes(10, from: 1_000)))
        try file.startOver()
        #expect(file.size == 0)
        try file.append(ByteBuffer(bytes: Self.bytes(20)))
        try file.flush()
        #expect(try Self.onDisk(path) == Self.bytes(20))
    }

    @Test func aFolderOrAFIFOWhereThePartialFileGoesIsRefusedAtOnceAndLeftAlone() throws {
        let folder = try Folder()
        let directory = folder.url.appending(path: "d.part")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        #expect(throws: HaulError.self) { _ = try PartialFile(openingAt: directory.path) }
        let fifo = folder.url.appending(path: "p.part")
        #expect(mkfifo(fifo.path, 0o644) == 0)
        // Without a reader, an open for writing would wait forever; it fails at once instead.
        #expect(throws: HaulError.self) { _ = try PartialFile(openingAt: fifo.path) }
        // With a reader the open succeeds; what was opened is not a regular file, so it is refused all the same.
        let reader = open(fifo.path, O_RDONLY | O_NONBLOCK)
        #expect(reader >= 0)
        defer { close(reader) }
        #expect(throws: HaulError.self) { _ = try PartialFile(openingAt: fifo.path) }
        var status = stat()
        #expect(lstat(fifo.path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFIFO)
    }

    @Test func theModificationTimeIsReadFromTheOpenFileAsAPathLookupWouldReadIt() throws {
        let folder = try Folder()
        let path = folder.url.appending(path: "f.part")
        var file = try PartialFile(openingAt: path.path)
        try file.append(ByteBuffer(bytes: Self.bytes(100)))
        try file.flush()
        #expect(file.modificationTime() != nil)
        #expect(file.modificationTime() == Persisted.sizeAndModification(path.path)?.1)
    }
}
