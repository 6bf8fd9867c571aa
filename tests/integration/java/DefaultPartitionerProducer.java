// Writes keyed records with the Java client's default partitioner, as a Java
// application would, and prints "key<TAB>partition" for each acknowledged
// record. Run as a single-file program: java -cp <kafka-clients...> DefaultPartitionerProducer.java BOOTSTRAP TOPIC N
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class DefaultPartitionerProducer {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        int n = Integer.parseInt(args[2]);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < n; i++) {
                byte[] key = ("k" + i).getBytes("UTF-8");
                RecordMetadata md = producer.send(new ProducerRecord<>(args[1], key, "v".getBytes("UTF-8"))).get();
                System.out.println("k" + i + "\t" + md.partition());
            }
        }
    }
}
