import Foundation
import NIOCore
import Testing

@testable import Haul

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
