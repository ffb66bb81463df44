import Foundation
import Haul
import Testing

@Suite("Reserving the process's table of file descriptors")
struct FileDescriptorTests {
    #if os(Linux)
    /// The size of this process's table of descriptors, as Linux reports it.
    static func tableSize() throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("FDSize:") })
        return try #require(Int(line.dropFirst("FDSize:".count).trimmingCharacters(in: .whitespaces)))
    }

    @Test func theTableHoldsTheReservedSlotsAndNoDescriptorIsLeftOpen() throws {
        let reserved = try #require(TransferManager.reserveFileDescriptors(2_048))
        // Fewer when the process's limit is lower; the table then holds that many.
        #expect(reserved <= 2_048)
        #expect(try Self.tableSize() >= reserved)
        // The descriptor duplicated into the last slot is closed again.
        #expect(!FileManager.default.fileExists(atPath: "/proc/self/fd/\(reserved - 1)"))
    }
    #endif
}
